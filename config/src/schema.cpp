#include "schema.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <set>

#include "xlaunch/comm_hooks.h"
#include "xlaunch/config/config_error.h"

namespace xlaunch::config::detail {

[[noreturn]] void fail(const FieldCtx& ctx, const std::string& found, const std::string& allowed,
                       const std::string& hint) {
  throw ConfigError({ctx.file, ctx.key, ctx.line, found, allowed, hint});
}

std::string describe(const YAML::Node& n) {
  if (n.IsScalar()) return "'" + n.Scalar() + "'";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  return "nothing (null)";
}

int line_of(const YAML::Node& n) {
  const YAML::Mark m = n.Mark();
  return m.is_null() ? 0 : m.line + 1;
}

namespace {

const std::string& scalar(const YAML::Node& n, const FieldCtx& ctx, const char* allowed) {
  if (!n.IsScalar()) fail(ctx, describe(n), allowed);
  return n.Scalar();
}

bool parse_long(const std::string& s, long* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  *out = std::strtol(s.c_str(), &end, 10);
  return *end == '\0' && errno == 0;
}

int read_int(const YAML::Node& n, const FieldCtx& ctx) {
  long v = 0;
  if (!parse_long(scalar(n, ctx, "an integer"), &v) || v < INT32_MIN || v > INT32_MAX)
    fail(ctx, describe(n), "an integer");
  return static_cast<int>(v);
}

double read_double(const YAML::Node& n, const FieldCtx& ctx) {
  const std::string& s = scalar(n, ctx, "a number");
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0') fail(ctx, describe(n), "a number");
  return v;
}

bool read_bool(const YAML::Node& n, const FieldCtx& ctx) {
  std::string s = scalar(n, ctx, "true or false");
  std::transform(s.begin(), s.end(), s.begin(), ::tolower);
  if (s == "true" || s == "yes" || s == "on") return true;
  if (s == "false" || s == "no" || s == "off") return false;
  fail(ctx, describe(n), "true or false");
}

std::string read_string(const YAML::Node& n, const FieldCtx& ctx) {
  if (n.IsNull()) return "";
  return scalar(n, ctx, "a string");
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

std::string read_choice(const YAML::Node& n, const FieldCtx& ctx, const std::vector<std::string>& choices,
                        const std::string& hint = "") {
  const std::string s = read_string(n, ctx);
  if (std::find(choices.begin(), choices.end(), s) == choices.end())
    fail(ctx, describe(n), "one of " + join(choices, ", "), hint);
  return s;
}

// A list of strings; a single scalar is split on `seps`.
std::vector<std::string> read_list(const YAML::Node& n, const FieldCtx& ctx, const char* seps) {
  std::vector<std::string> out;
  if (n.IsNull()) return out;
  if (n.IsSequence()) {
    for (const auto& item : n) out.push_back(scalar(item, ctx, "a list of strings"));
    return out;
  }
  const std::string& s = scalar(n, ctx, "a list of strings");
  size_t i = 0;
  while (i < s.size()) {
    const size_t j = s.find_first_of(seps, i);
    const std::string part = s.substr(i, j == std::string::npos ? std::string::npos : j - i);
    if (!part.empty()) out.push_back(part);
    if (j == std::string::npos) break;
    i = j + 1;
  }
  return out;
}

std::vector<int> read_gpu_ids(const YAML::Node& n, const FieldCtx& ctx) {
  const char* allowed = "'all', or GPU ids as a list or comma list (e.g. 0,1)";
  if (n.IsScalar() && (n.Scalar() == "all" || n.Scalar().empty())) return {};
  std::vector<int> ids;
  for (const std::string& s : read_list(n, ctx, ", ")) {
    long v = 0;
    if (!parse_long(s, &v) || v < 0 || v > 4096) fail(ctx, describe(n), allowed);
    ids.push_back(static_cast<int>(v));
  }
  if (ids.empty()) fail(ctx, describe(n), allowed);
  return ids;
}

// log_with: a tracker name, "all", or a list (or comma list) of them; "all" expands to every
// tracker, and a name given twice counts once.
std::vector<std::string> read_log_with(const YAML::Node& n, const FieldCtx& ctx) {
  std::vector<std::string> out;
  const std::string allowed = "tensorboard, jsonl, csv or all, or a list of them (e.g. [tensorboard, csv])";
  for (const std::string& s : read_list(n, ctx, ", ")) {
    if (s == "all" || s == "none") {
      if (s == "all") out = kLogWith;
      continue;
    }
    if (std::find(kLogWith.begin(), kLogWith.end(), s) == kLogWith.end())
      fail(ctx, "'" + s + "'", allowed, "Accelerate's other trackers (wandb, mlflow, comet_ml...) are Python services");
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  }
  return out;
}

template <class T>
using Get = T& (*)(LaunchConfig&);

// Strings other YAML readers (PyYAML, so Accelerate) would take for a bool or null are quoted.
void emit(YAML::Emitter& out, const std::string& s) {
  static const std::set<std::string> kWords = {"y", "n", "yes", "no", "true", "false", "on", "off", "null", "~"};
  std::string lower = s;
  std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
  if (kWords.count(lower)) out << YAML::SingleQuoted;
  out << s;
}
void emit(YAML::Emitter& out, int v) { out << v; }
void emit(YAML::Emitter& out, double v) { out << v; }
void emit(YAML::Emitter& out, bool v) { out << v; }

Field make(const std::string& key, std::function<void(const YAML::Node&, LaunchConfig&, const FieldCtx&)> read,
           std::function<void(YAML::Emitter&, const LaunchConfig&)> write) {
  const size_t dot = key.find('.');
  Field f;
  f.key = key;
  f.section = dot == std::string::npos ? "" : key.substr(0, dot);
  f.leaf = dot == std::string::npos ? key : key.substr(dot + 1);
  f.read = std::move(read);
  f.write = std::move(write);
  return f;
}

// Typed field builders: `get` gives the member; the writer reads it from a copy.
template <class T, class Reader>
Field typed(const std::string& key, Get<T> get, Reader reader) {
  return make(
      key, [get, reader](const YAML::Node& n, LaunchConfig& c, const FieldCtx& ctx) { get(c) = reader(n, ctx); },
      [get](YAML::Emitter& out, const LaunchConfig& c) {
        LaunchConfig copy = c;
        emit(out, get(copy));
      });
}

Field int_field(const std::string& key, Get<int> get) { return typed<int>(key, get, read_int); }
Field bool_field(const std::string& key, Get<bool> get) { return typed<bool>(key, get, read_bool); }
Field string_field(const std::string& key, Get<std::string> get) {
  return typed<std::string>(key, get, read_string);
}
Field list_field(const std::string& key, Get<std::vector<std::string>> get, const char* seps) {
  return make(
      key, [get, seps](const YAML::Node& n, LaunchConfig& c, const FieldCtx& ctx) { get(c) = read_list(n, ctx, seps); },
      [get](YAML::Emitter& out, const LaunchConfig& c) {
        LaunchConfig copy = c;
        out << YAML::Flow << get(copy);
      });
}

const std::vector<std::string> kBindTo = {"none", "hwthread", "core", "l2cache", "l3cache", "socket", "numa", "board"};
const std::vector<std::string> kMapBy = {"slot", "hwthread", "core", "l2cache", "l3cache", "socket",
                                         "numa", "board",   "node", "ppr",      "seq",    "dist"};

std::vector<Field> build_fields() {
  std::vector<Field> f;
  f.push_back(int_field("config_version", [](LaunchConfig& c) -> int& { return c.config_version; }));
  f.push_back(typed<std::string>("compute_environment",
                                 [](LaunchConfig& c) -> std::string& { return c.compute_environment; },
                                 [](const YAML::Node& n, const FieldCtx& ctx) {
                                   return read_choice(n, ctx, {"LOCAL_MACHINE"},
                                                      "xlaunch runs on machines you start it on; cloud "
                                                      "environments such as AMAZON_SAGEMAKER are Accelerate-only");
                                 }));
  f.push_back(make(
      "distributed_type",
      [](const YAML::Node& n, LaunchConfig& c, const FieldCtx& ctx) {
        // DEEPSPEED is an Accelerate file's: it runs as MULTI_GPU (MULTI_CPU with use_cpu) at the ZeRO
        // stage its deepspeed_config asks for, which accelerate_deepspeed.h reads once the whole file is.
        const std::string s = read_choice(n, ctx, {"NO", "MULTI_CPU", "MULTI_GPU", "DEEPSPEED"},
                                          "FSDP, XLA and the other Accelerate types are not supported");
        c.distributed_type = s == "NO" ? DistributedType::No
                             : s == "MULTI_CPU" ? DistributedType::MultiCpu
                                                : DistributedType::MultiGpu;
      },
      [](YAML::Emitter& out, const LaunchConfig& c) { emit(out, std::string(to_string(c.distributed_type))); }));
  f.push_back(int_field("num_processes", [](LaunchConfig& c) -> int& { return c.num_processes; }));
  f.push_back(make(
      "num_machines",
      [](const YAML::Node& n, LaunchConfig& c, const FieldCtx& ctx) {
        if (!n.IsScalar() || !parse_machines(n.Scalar(), &c.min_machines, &c.num_machines))
          fail(ctx, describe(n), "an integer >= 1, or MIN:MAX for an elastic job (e.g. 2:4, MIN <= MAX)");
      },
      [](YAML::Emitter& out, const LaunchConfig& c) {
        if (c.min_machines > 0) out << machines_string(c);
        else out << c.num_machines;
      }));
  f.push_back(int_field("machine_rank", [](LaunchConfig& c) -> int& { return c.machine_rank; }));
  f.push_back(string_field("main_process_ip", [](LaunchConfig& c) -> std::string& { return c.main_process_ip; }));
  f.push_back(int_field("main_process_port", [](LaunchConfig& c) -> int& { return c.main_process_port; }));
  f.push_back(make(
      "gpu_ids", [](const YAML::Node& n, LaunchConfig& c, const FieldCtx& ctx) { c.gpu_ids = read_gpu_ids(n, ctx); },
      [](YAML::Emitter& out, const LaunchConfig& c) { out << gpu_ids_string(c.gpu_ids); }));
  f.push_back(make(
      "mixed_precision",
      [](const YAML::Node& n, LaunchConfig& c, const FieldCtx& ctx) {
        const std::string s = read_choice(n, ctx, {"no", "fp16", "bf16"}, "fp8 is Accelerate-only");
        c.mixed_precision = s == "no" ? MixedPrecision::No : s == "fp16" ? MixedPrecision::Fp16 : MixedPrecision::Bf16;
      },
      [](YAML::Emitter& out, const LaunchConfig& c) { emit(out, std::string(to_string(c.mixed_precision))); }));
  f.push_back(int_field("gradient_accumulation_steps",
                        [](LaunchConfig& c) -> int& { return c.gradient_accumulation_steps; }));
  f.push_back(bool_field("use_cpu", [](LaunchConfig& c) -> bool& { return c.use_cpu; }));
  f.push_back(bool_field("debug", [](LaunchConfig& c) -> bool& { return c.debug; }));
  f.push_back(bool_field("sync_batchnorm", [](LaunchConfig& c) -> bool& { return c.sync_batchnorm; }));
  f.push_back(int_field("num_cpu_threads_per_process",
                        [](LaunchConfig& c) -> int& { return c.num_cpu_threads_per_process; }));

  f.push_back(string_field("mpi.hostfile", [](LaunchConfig& c) -> std::string& { return c.mpi.hostfile; }));
  f.push_back(list_field("mpi.hosts", [](LaunchConfig& c) -> std::vector<std::string>& { return c.mpi.hosts; }, ", "));
  f.push_back(typed<std::string>("mpi.bind_to", [](LaunchConfig& c) -> std::string& { return c.mpi.bind_to; },
                                 [](const YAML::Node& n, const FieldCtx& ctx) { return read_choice(n, ctx, kBindTo); }));
  f.push_back(typed<std::string>(
      "mpi.map_by", [](LaunchConfig& c) -> std::string& { return c.mpi.map_by; },
      [](const YAML::Node& n, const FieldCtx& ctx) {
        const std::string s = read_string(n, ctx);
        const std::string head = s.substr(0, s.find(':'));
        if (!s.empty() && std::find(kMapBy.begin(), kMapBy.end(), head) == kMapBy.end())
          fail(ctx, describe(n), "empty, or an Open MPI --map-by value starting with one of " + join(kMapBy, ", "));
        return s;
      }));
  f.push_back(list_field("mpi.extra_args",
                         [](LaunchConfig& c) -> std::vector<std::string>& { return c.mpi.extra_args; }, " "));

  f.push_back(typed<double>("ddp.bucket_cap_mb", [](LaunchConfig& c) -> double& { return c.ddp.bucket_cap_mb; },
                            read_double));
  f.push_back(bool_field("ddp.find_unused_parameters",
                         [](LaunchConfig& c) -> bool& { return c.ddp.find_unused_parameters; }));
  f.push_back(bool_field("ddp.broadcast_buffers", [](LaunchConfig& c) -> bool& { return c.ddp.broadcast_buffers; }));
  f.push_back(typed<std::string>("ddp.comm_hook", [](LaunchConfig& c) -> std::string& { return c.ddp.comm_hook; },
                                 [](const YAML::Node& n, const FieldCtx& ctx) {
                                   return read_choice(n, ctx, comm_hook_names());
                                 }));
  f.push_back(int_field("ddp.powersgd_rank", [](LaunchConfig& c) -> int& { return c.ddp.powersgd_rank; }));
  f.push_back(int_field("ddp.powersgd_start_step", [](LaunchConfig& c) -> int& { return c.ddp.powersgd_start_step; }));
  f.push_back(int_field("ddp.zero_stage", [](LaunchConfig& c) -> int& { return c.ddp.zero_stage; }));

  f.push_back(make(
      "loader.num_workers",
      [](const YAML::Node& n, LaunchConfig& c, const FieldCtx& ctx) {
        if (n.IsScalar() && n.Scalar() == "auto") {
          c.loader.num_workers = LoaderSection::kAutoWorkers;
        } else {
          long v = 0;
          if (!n.IsScalar() || !parse_long(n.Scalar(), &v) || v < 0 || v > 1024)
            fail(ctx, describe(n), "'auto' or an integer from 0 to 1024");
          c.loader.num_workers = static_cast<int>(v);
        }
      },
      [](YAML::Emitter& out, const LaunchConfig& c) {
        if (c.loader.num_workers == LoaderSection::kAutoWorkers) out << "auto";
        else out << c.loader.num_workers;
      }));
  f.push_back(bool_field("loader.pin_memory", [](LaunchConfig& c) -> bool& { return c.loader.pin_memory; }));
  f.push_back(bool_field("loader.even_batches", [](LaunchConfig& c) -> bool& { return c.loader.even_batches; }));
  f.push_back(int_field("loader.prefetch_factor", [](LaunchConfig& c) -> int& { return c.loader.prefetch_factor; }));

  f.push_back(string_field("log_dir", [](LaunchConfig& c) -> std::string& { return c.log_dir; }));
  f.push_back(int_field("max_restarts", [](LaunchConfig& c) -> int& { return c.max_restarts; }));
  f.push_back(int_field("max_machine_failures", [](LaunchConfig& c) -> int& { return c.max_machine_failures; }));
  f.push_back(int_field("timeout_s", [](LaunchConfig& c) -> int& { return c.timeout_s; }));
  f.push_back(bool_field("report", [](LaunchConfig& c) -> bool& { return c.report; }));
  f.push_back(string_field("trace_dir", [](LaunchConfig& c) -> std::string& { return c.trace_dir; }));
  f.push_back(int_field("trace_steps", [](LaunchConfig& c) -> int& { return c.trace_steps; }));
  f.push_back(int_field("profile_ops", [](LaunchConfig& c) -> int& { return c.profile_ops; }));
  f.push_back(bool_field("record_shapes", [](LaunchConfig& c) -> bool& { return c.record_shapes; }));
  f.push_back(bool_field("cudnn_benchmark", [](LaunchConfig& c) -> bool& { return c.cudnn_benchmark; }));
  f.push_back(bool_field("deterministic", [](LaunchConfig& c) -> bool& { return c.deterministic; }));

  f.push_back(make(
      "log_with",
      [](const YAML::Node& n, LaunchConfig& c, const FieldCtx& ctx) { c.log_with = read_log_with(n, ctx); },
      [](YAML::Emitter& out, const LaunchConfig& c) { out << YAML::Flow << c.log_with; }));
  f.push_back(int_field("report_interval", [](LaunchConfig& c) -> int& { return c.report_interval; }));
  f.push_back(int_field("log_histograms_every_n_steps",
                        [](LaunchConfig& c) -> int& { return c.log_histograms_every_n_steps; }));
  f.push_back(string_field("project_dir", [](LaunchConfig& c) -> std::string& { return c.project_dir; }));
  f.push_back(int_field("checkpoint.total_limit", [](LaunchConfig& c) -> int& { return c.checkpoint.total_limit; }));
  f.push_back(int_field("checkpoint.every_n_steps", [](LaunchConfig& c) -> int& { return c.checkpoint.every_n_steps; }));
  f.push_back(bool_field("checkpoint.every_epoch", [](LaunchConfig& c) -> bool& { return c.checkpoint.every_epoch; }));
  f.push_back(typed<std::string>(
      "preempt_signal", [](LaunchConfig& c) -> std::string& { return c.preempt_signal; },
      [](const YAML::Node& n, const FieldCtx& ctx) {
        return read_choice(n, ctx, {std::begin(kPreemptSignals), std::end(kPreemptSignals)},
                           "the signal your scheduler sends before it ends a job (Slurm: --signal=B:USR1@180)");
      }));
  f.push_back(int_field("preempt_timeout_s", [](LaunchConfig& c) -> int& { return c.preempt_timeout_s; }));
  return f;
}

}  // namespace

const std::vector<Field>& fields() {
  static const std::vector<Field> f = build_fields();
  return f;
}

const std::vector<std::string>& sections() {
  static const std::vector<std::string> s = [] {
    std::vector<std::string> out;
    for (const Field& f : fields())
      if (!f.section.empty() && std::find(out.begin(), out.end(), f.section) == out.end()) out.push_back(f.section);
    return out;
  }();
  return s;
}

}  // namespace xlaunch::config::detail
