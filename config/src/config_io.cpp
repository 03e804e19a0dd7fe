#include "xlaunch/config/config_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <type_traits>

#include "accelerate_deepspeed.h"
#include "accelerate_fsdp.h"
#include "accelerate_keys.h"
#include "schema.h"
#include "xlaunch/config/config_error.h"
#include "xlaunch/config/setting.h"
#include "xlaunch/zero_stages.h"

namespace xlaunch::config {

using detail::describe;
using detail::FieldCtx;
using detail::fields;
using detail::line_of;

const char* to_string(DistributedType t) {
  switch (t) {
    case DistributedType::No: return "NO";
    case DistributedType::MultiCpu: return "MULTI_CPU";
    case DistributedType::MultiGpu: return "MULTI_GPU";
  }
  return "?";
}

std::string gpu_ids_string(const std::vector<int>& ids) {
  if (ids.empty()) return "all";
  std::string s;
  for (int id : ids) s += (s.empty() ? "" : ",") + std::to_string(id);
  return s;
}

std::string machines_string(const LaunchConfig& c) {
  const std::string max = std::to_string(c.num_machines);
  return c.min_machines > 0 ? std::to_string(c.min_machines) + ":" + max : max;
}

bool parse_machines(const std::string& text, int* min_machines, int* num_machines) {
  auto number = [](const std::string& s, int* out) {
    if (s.empty() || s.size() > 6 || s.find_first_not_of("0123456789") != std::string::npos) return false;
    *out = std::stoi(s);
    return *out >= 1;
  };
  const size_t colon = text.find(':');
  int lo = 0, hi = 0;
  if (colon == std::string::npos) {
    if (!number(text, &hi)) return false;
  } else if (!number(text.substr(0, colon), &lo) || !number(text.substr(colon + 1), &hi) || lo > hi) {
    return false;
  }
  *min_machines = lo;
  *num_machines = hi;
  return true;
}

int edit_distance(const std::string& a, const std::string& b) {
  std::vector<int> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

const std::vector<std::string>& schema_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k;
    for (const auto& f : fields()) k.push_back(f.key);
    return k;
  }();
  return keys;
}

namespace {

// "did you mean 'x'?" for the closest known key, when it is close enough to be a typo. A leaf
// written at the wrong level ("hostfile" at the top) points to its dotted key.
std::string did_you_mean(const std::string& key, const std::string& section) {
  std::string best;
  int best_d = 1 << 30;
  auto consider = [&](const std::string& name, const std::string& shown) {
    const int d = edit_distance(key, name);
    if (d < best_d) best_d = d, best = shown;
  };
  for (const auto& f : fields()) {
    if (f.section == section) consider(f.leaf, f.leaf);
    else if (section.empty()) consider(f.leaf, f.key + " (under " + f.section + ":)");
  }
  if (section.empty())
    for (const auto& s : detail::sections()) consider(s, s);
  const int limit = std::max(2, static_cast<int>(key.size()) / 3);
  return best_d <= limit ? "did you mean '" + best + "'?" : "";
}

std::string known_keys(const std::string& section) {
  std::string s;
  for (const auto& f : fields())
    if (f.section == section) s += (s.empty() ? "" : ", ") + f.leaf;
  if (section.empty())
    for (const auto& sec : detail::sections()) s += ", " + sec;
  return s;
}

// Reads the keys of one mapping (the top level, or a section) into `out`.
void read_map(const YAML::Node& map, const std::string& section, LoadedConfig& out) {
  std::map<std::string, int> seen;  // leaf -> line, to refuse a key given twice
  for (auto it = map.begin(); it != map.end(); ++it) {
    if (!it->first.IsScalar())
      detail::fail({out.file, section, line_of(it->first)}, "a key that is " + describe(it->first), "plain key names");
    const std::string leaf = it->first.Scalar();
    const std::string key = section.empty() ? leaf : section + "." + leaf;
    const int line = line_of(it->first);
    FieldCtx ctx{out.file, key, line};
    if (auto prev = seen.find(leaf); prev != seen.end())
      detail::fail(ctx, "it a second time (first on line " + std::to_string(prev->second) + ")", "each key once");
    seen[leaf] = line;
    auto f = std::find_if(fields().begin(), fields().end(),
                          [&](const detail::Field& x) { return x.key == key; });
    // Null is how Accelerate writes "not set": the key keeps its default and is listed as defaulted.
    if (f != fields().end() && it->second.IsNull()) continue;
    out.lines[key] = line;

    if (section.empty() && std::find(detail::sections().begin(), detail::sections().end(), leaf) !=
                               detail::sections().end()) {
      if (it->second.IsNull()) continue;
      if (!it->second.IsMap()) detail::fail(ctx, describe(it->second), "a mapping of " + known_keys(leaf));
      read_map(it->second, leaf, out);
      continue;
    }
    if (f != fields().end()) {
      f->read(it->second, out.config, ctx);
      continue;
    }
    if (section.empty() && detail::is_accelerate_only_key(leaf)) {
      out.unsupported.push_back(leaf);
      // Accelerate's MULTI_CPU hostfile means the same thing as ours.
      if (leaf == "mpirun_config" && it->second.IsMap() && it->second["mpirun_hostfile"] &&
          it->second["mpirun_hostfile"].IsScalar() && !map["mpi"]) {
        out.config.mpi.hostfile = it->second["mpirun_hostfile"].Scalar();
        out.lines["mpi.hostfile"] = line;
        out.notes.push_back("mpirun_config.mpirun_hostfile taken as mpi.hostfile");
      }
      continue;
    }
    detail::fail(ctx, "an unknown key", "one of " + known_keys(section), did_you_mean(leaf, section));
  }
}

std::string join_names(const std::vector<std::string>& v, const char* sep = ",") {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

std::string show(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

}  // namespace

void validate(const LaunchConfig& c, std::optional<int> gpu_count, const std::string& file,
              const std::map<std::string, int>& lines) {
  auto check = [&](bool ok, const std::string& key, const std::string& found, const std::string& allowed,
                   const std::string& hint = "") {
    if (ok) return;
    auto l = lines.find(key);
    throw ConfigError({file, key, l == lines.end() ? 0 : l->second, found, allowed, hint});
  };
  auto q = [](const auto& v) {
    if constexpr (std::is_same_v<std::decay_t<decltype(v)>, std::string>) return "'" + v + "'";
    else return "'" + show(static_cast<double>(v)) + "'";
  };
  // Each row's own check (xlaunch/settings.h): RANGE's condition on the value v, ONE_OF's names.
  // (An enum, such as mixed_precision's, holds nothing else.)
  auto one_of = [&](const auto& v, const auto& names, const std::string& key, const std::string& hint) {
    if constexpr (std::is_same_v<std::decay_t<decltype(v)>, std::string>) {
      const std::vector<std::string> choices(std::begin(names), std::end(names));
      check(std::find(choices.begin(), choices.end(), v) != choices.end(), key, "'" + v + "'",
            "one of " + join_names(choices, ", "), hint);
    }
  };
#define XLAUNCH_VALIDATE_RANGE(condition, allowed, hint, S, name) \
  {                                                                \
    const auto& v = c.S name;                                      \
    check(condition, #S #name, q(v), allowed, hint);               \
  }
#define XLAUNCH_VALIDATE_ANY(...)
#define XLAUNCH_VALIDATE_ONE_OF(names, allowed, hint, S, name) one_of(c.S name, names, #S #name, hint);
#define XLAUNCH_VALIDATE_BY_HAND(...)
#define XLAUNCH_VALIDATE_ROW(S, name, type, env, dflt, cli, check, runtime, meaning) \
  XLAUNCH_BY_CHECK(check, XLAUNCH_VALIDATE_, S, name)
  XLAUNCH_SETTINGS(XLAUNCH_VALIDATE_ROW)
#undef XLAUNCH_VALIDATE_ROW
#undef XLAUNCH_VALIDATE_BY_HAND
#undef XLAUNCH_VALIDATE_ONE_OF
#undef XLAUNCH_VALIDATE_ANY
#undef XLAUNCH_VALIDATE_RANGE

  // The BY_HAND rows' checks.
  const std::string machines = "'" + machines_string(c) + "'";
  check(c.num_machines >= 1, "num_machines", machines, "an integer >= 1, or MIN:MAX");
  check(c.min_machines >= 0 && c.min_machines <= c.num_machines, "num_machines", machines,
        "MIN:MAX with 1 <= MIN <= MAX");
  check(c.machine_rank >= 0 && c.machine_rank < c.num_machines, "machine_rank", q(c.machine_rank),
        "0 to num_machines - 1 = " + std::to_string(c.num_machines - 1));
  check(c.loader.num_workers >= 0 || c.loader.num_workers == LoaderSection::kAutoWorkers, "loader.num_workers",
        q(c.loader.num_workers), "'auto' or an integer >= 0");

  // Relations between keys.
  check(!(c.deterministic && c.cudnn_benchmark), "cudnn_benchmark", "true with deterministic: true",
        "false when deterministic is true",
        "cuDNN's autotuner picks algorithms by timing them, so results change from run to run; drop one of the two");
  const std::string stage = std::to_string(c.ddp.zero_stage);
  check(!(c.ddp.comm_hook == "powersgd" && shards_gradients(c.ddp.zero_stage)), "ddp.comm_hook",
        "'powersgd' with ddp.zero_stage " + stage, "none, fp16 or bf16 with ddp.zero_stage " + stage,
        "PowerSGD approximates whole weight matrices and allreduces the low-rank factors; stage " + stage +
            " reduce-scatters the gradients, so each rank keeps only a shard of each and there is no matrix to "
            "approximate. Use ddp.zero_stage 1 with powersgd, or comm_hook none, fp16 or bf16 with stage " + stage);
  if (c.ddp.shard_group == "machine") {
    const std::string why = "ddp.shard_group machine (hybrid sharding, FSDP's HYBRID_SHARD) shards within each machine and "
                            "keeps a replica on every machine";
    check(shards_optimizer_state(c.ddp.zero_stage), "ddp.shard_group", "'machine' with ddp.zero_stage " + stage,
          "world with ddp.zero_stage 0", why + "; at stage 0 nothing is sharded: set ddp.zero_stage 3 (or 2, 1)");
    check(c.num_machines > 1, "ddp.shard_group", "'machine' on one machine (num_machines 1)", "world on one machine",
          why + "; on one machine the machine is the whole job: use world (FULL_SHARD), the same sharding");
    check(c.num_processes >= 2 * c.num_machines, "ddp.shard_group",
          "'machine' with " + std::to_string(c.num_processes) + " processes on " + std::to_string(c.num_machines) +
              " machines",
          "world with one process per machine",
          why + "; with one process per machine there is nothing to shard within it: use world");
    check(c.distributed_type != DistributedType::MultiGpu, "ddp.shard_group", "'machine' with MULTI_GPU",
          "world on GPUs", why + "; over NCCL (GPUs) it is not built yet: use world (FULL_SHARD)");
  }
  const bool distributed = c.distributed_type != DistributedType::No;
  check(distributed || c.num_processes == 1, "num_processes", q(c.num_processes),
        "1 with distributed_type NO", "set distributed_type: MULTI_CPU or MULTI_GPU to start several processes");
  check(distributed || c.num_machines == 1, "num_machines", q(c.num_machines), "1 with distributed_type NO",
        "set distributed_type: MULTI_CPU or MULTI_GPU to use several machines");
  check(c.num_processes % c.num_machines == 0, "num_processes", q(c.num_processes),
        "a multiple of num_machines (" + std::to_string(c.num_machines) + ")",
        c.min_machines > 0 ? "with num_machines MIN:MAX, num_processes counts the processes of MAX machines together"
                           : "num_processes counts the processes of all machines together");
  check(!(c.use_cpu && c.distributed_type == DistributedType::MultiGpu), "use_cpu", "'true' with MULTI_GPU",
        "false with distributed_type MULTI_GPU", "use distributed_type: MULTI_CPU to train on CPUs");
  check(c.num_machines == 1 || !c.mpi.hostfile.empty() || !c.mpi.hosts.empty(), "num_machines",
        machines, "1, unless mpi.hostfile or mpi.hosts lists the machines",
        "mpirun starts the ranks of every machine and must know them");
  if (is_elastic(c))
    check(c.mpi.hosts.empty() || static_cast<int>(c.mpi.hosts.size()) >= c.min_machines, "mpi.hosts",
          std::to_string(c.mpi.hosts.size()) + " hosts",
          "at least MIN of num_machines " + machines_string(c) + " (" + std::to_string(c.min_machines) + ") hosts",
          "an elastic job starts on up to MAX of the hosts listed; hosts beyond MAX stand by");
  else
    check(c.mpi.hosts.empty() || static_cast<int>(c.mpi.hosts.size()) == c.num_machines, "mpi.hosts",
          std::to_string(c.mpi.hosts.size()) + " hosts",
          "exactly num_machines (" + std::to_string(c.num_machines) + ") hosts");

  check(c.report_interval >= 1 && c.report_interval <= 1000000, "report_interval", q(c.report_interval),
        "an integer from 1 to 1000000");
  check(c.log_histograms_every_n_steps >= 0, "log_histograms_every_n_steps", q(c.log_histograms_every_n_steps),
        "0 (none) or a number of optimizer steps");
  check(c.log_with.empty() || !c.project_dir.empty(), "log_with", "'" + join_names(c.log_with) + "'",
        "none without a project_dir", "set project_dir (or --project_dir): the trackers write to <project_dir>/<project_name>");
  check(c.log_histograms_every_n_steps == 0 ||
            std::find(c.log_with.begin(), c.log_with.end(), "tensorboard") != c.log_with.end(),
        "log_histograms_every_n_steps", q(c.log_histograms_every_n_steps), "0 unless log_with has tensorboard",
        "histograms are written to TensorBoard only");
  // Named checkpoints are saved under project_dir: without one the runtime could not save them.
  const std::string needs_dir = "set project_dir (or --project_dir): named checkpoints go to <project_dir>/checkpoints";
  check(c.checkpoint.every_n_steps == 0 || !c.project_dir.empty(), "checkpoint.every_n_steps",
        q(c.checkpoint.every_n_steps), "0 without a project_dir", needs_dir);
  check(!c.checkpoint.every_epoch || !c.project_dir.empty(), "checkpoint.every_epoch", "'true'",
        "false without a project_dir", needs_dir);
  check(c.checkpoint.total_limit == 0 || !c.project_dir.empty(), "checkpoint.total_limit",
        q(c.checkpoint.total_limit), "0 without a project_dir", needs_dir);

  std::set<int> unique(c.gpu_ids.begin(), c.gpu_ids.end());
  check(unique.size() == c.gpu_ids.size(), "gpu_ids", "'" + gpu_ids_string(c.gpu_ids) + "'", "each GPU id once");
  if (c.distributed_type != DistributedType::MultiGpu || !gpu_count) return;
  const std::string have = *gpu_count == 0 ? "this machine has no GPU"
                                           : "this machine has " + std::to_string(*gpu_count) + " GPU(s), ids 0 to " +
                                                 std::to_string(*gpu_count - 1);
  for (int id : c.gpu_ids)
    check(id < *gpu_count, "gpu_ids", "GPU " + std::to_string(id), have,
          "fix gpu_ids, pass --cpu, or use distributed_type: MULTI_CPU to train on CPUs");
  if (c.num_machines == 1)
    check(*gpu_count > 0, "distributed_type", "'MULTI_GPU'", "MULTI_CPU or NO: " + have, "pass --cpu, or fix the config");
  const int usable = c.gpu_ids.empty() ? *gpu_count : static_cast<int>(c.gpu_ids.size());
  if (usable > 0)
    check(processes_per_machine(c) <= usable, "num_processes", q(c.num_processes),
          "at most one process per usable GPU (" + std::to_string(usable) + " per machine)");
}

LoadedConfig parse_config(const std::string& text, const std::string& file, std::optional<int> gpu_count) {
  LoadedConfig out;
  out.file = file;
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw ConfigError({file, "", e.mark.is_null() ? 0 : e.mark.line + 1, "malformed YAML: " + e.msg,
                       "a YAML mapping of key: value lines"});
  }
  if (root.IsNull())
    throw ConfigError({file, "", 0, "an empty file", "a YAML mapping of key: value lines",
                       "write one with `xlaunch config` or `xlaunch config default`"});
  if (!root.IsMap())
    throw ConfigError({file, "", line_of(root), describe(root), "a YAML mapping of key: value lines"});
  read_map(root, "", out);
  const YAML::Node& top = root;
  const std::string type = top["distributed_type"] && top["distributed_type"].IsScalar() ? top["distributed_type"].Scalar() : "";
  if (type == "DEEPSPEED") detail::apply_deepspeed(top, out);
  if (type == "FSDP") detail::apply_fsdp(top, out);
  for (const auto& f : fields())
    if (!out.lines.count(f.key)) out.defaulted.push_back(f.key);
  validate(out.config, gpu_count, file, out.lines);
  return out;
}

void read_setting(LaunchConfig& c, const std::string& key, const std::string& text, const std::string& source) {
  const auto f = std::find_if(fields().begin(), fields().end(), [&](const detail::Field& x) { return x.key == key; });
  if (f == fields().end()) throw std::logic_error("read_setting: no key " + key + " in the schema");
  f->read(YAML::Node(text), c, FieldCtx{source, key, 0});
}

LoadedConfig load_config(const std::string& path, std::optional<int> gpu_count) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0)
    throw ConfigError({path, "", 0, std::string("no readable file (") + std::strerror(errno) + ")",
                       "an existing config file", "create one with `xlaunch config`"});
  if (!S_ISREG(st.st_mode)) throw ConfigError({path, "", 0, "not a regular file", "a config file"});
  std::ifstream in(path, std::ios::binary);
  if (!in.is_open())
    throw ConfigError({path, "", 0, std::string("an unreadable file (") + std::strerror(errno) + ")",
                       "a readable config file"});
  std::ostringstream text;
  text << in.rdbuf();
  return parse_config(text.str(), path, gpu_count);
}

std::string to_yaml(const LaunchConfig& c) {
  YAML::Emitter out;
  out << YAML::Comment("xlaunch launch config; every key is described in docs/config-reference.md");
  out << YAML::BeginMap;
  std::string open_section;
  for (const auto& f : fields()) {
    if (f.section != open_section) {
      if (!open_section.empty()) out << YAML::EndMap;
      if (!f.section.empty()) out << YAML::Key << f.section << YAML::Value << YAML::BeginMap;
      open_section = f.section;
    }
    out << YAML::Key << f.leaf << YAML::Value;
    f.write(out, c);
  }
  if (!open_section.empty()) out << YAML::EndMap;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

void save_config(const LaunchConfig& c, const std::string& path) {
  auto fail = [&](const std::string& what) {
    throw ConfigError({path, "", 0, what + " (" + std::strerror(errno) + ")", "a writable location"});
  };
  const std::string text = to_yaml(c);
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  if (std::error_code ec; std::filesystem::create_directories(dir, ec), ec) {
    errno = ec.value();
    fail("cannot create directory " + dir);
  }
  std::string tmp = (dir.empty() ? "" : dir + "/") + "." + base + ".tmp.XXXXXX";
  const int fd = mkstemp(tmp.data());
  if (fd < 0) fail("cannot create a temporary file in " + dir);
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = errno;
      close(fd), unlink(tmp.c_str());
      errno = e;
      fail("cannot write " + tmp);
    }
    done += static_cast<size_t>(n);
  }
  if (fchmod(fd, 0644) != 0 || fsync(fd) != 0 || close(fd) != 0) {
    const int e = errno;
    unlink(tmp.c_str());
    errno = e;
    fail("cannot flush " + tmp);
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    unlink(tmp.c_str());
    errno = e;
    fail("cannot rename " + tmp + " to it");
  }
}

}  // namespace xlaunch::config
