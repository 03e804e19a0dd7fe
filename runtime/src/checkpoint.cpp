// Accelerator::save_state / load_state and the checkpoint directory format (checkpoint.h).
//
// Who does what: every rank sends its RNG state to rank 0, which alone writes the directory; the
// outcome (empty or an error message) is then broadcast, so every rank returns only once the
// checkpoint exists, and a failed write throws the same error on every rank instead of hanging.
// On load, rank 0 reads and verifies the files and broadcasts them, so the directory need only be
// visible to rank 0, and every rank validates the same bytes (a refusal happens everywhere).
#include "xlaunch/checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/ops/empty.h>
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/cuda.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <algorithm>
#include <set>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "xlaunch/accelerator.h"
#include "xlaunch/env_vars.h"
#include "xlaunch/error.h"

namespace fs = std::filesystem;

namespace xlaunch {
namespace checkpoint {
namespace {

std::function<void(const std::string&)>& save_hook() {
  static std::function<void(const std::string&)> hook;
  return hook;
}

void notify(const std::string& event) {
  if (save_hook()) save_hook()(event);
}

[[noreturn]] void throw_io(const std::string& what, const fs::path& path) {
  throw Error(what + " " + path.string() + ": " + std::strerror(errno));
}

// ---- files, durably ------------------------------------------------------------------------

void write_file(const fs::path& path, const std::string& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw_io("cannot create", path);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      throw_io("cannot write", path);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    ::close(fd);
    throw_io("cannot fsync", path);
  }
  if (::close(fd) != 0) throw_io("cannot close", path);
}

// A rename or a new entry is durable only once its directory is fsynced.
void fsync_dir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw_io("cannot open directory", dir);
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) throw_io("cannot fsync directory", dir);
}

void rename_path(const fs::path& from, const fs::path& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) throw_io("cannot rename " + from.string() + " to", to);
}

// Our own, not std::filesystem::remove_all: libtorch.so exports a copy of it that crashes when
// the program's libstdc++ calls resolve to it. Missing is fine.
void remove_tree(const fs::path& path) {
  if (::access(path.c_str(), F_OK) != 0) return;
  const auto remove_one = [](const char* p, const struct stat*, int, struct FTW*) { return ::remove(p); };
  if (::nftw(path.c_str(), remove_one, 16, FTW_DEPTH | FTW_PHYS) != 0) throw_io("cannot remove", path);
}

bool is_empty_dir(const fs::path& path) {
  DIR* d = ::opendir(path.c_str());
  if (!d) return false;
  int entries = 0;
  while (const dirent* e = ::readdir(d))
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) ++entries;
  ::closedir(d);
  return entries == 0;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_io("cannot open", path);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

uint32_t crc32_of(const std::string& bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  size_t done = 0;
  while (done < bytes.size()) {  // zlib takes 32-bit lengths
    const uInt n = static_cast<uInt>(std::min<size_t>(bytes.size() - done, 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + done), n);
    done += n;
  }
  return static_cast<uint32_t>(crc);
}

fs::path normalized(const std::string& dir) {
  if (dir.empty()) throw UsageError("checkpoint directory is empty; pass a path such as \"checkpoints/last\"");
  fs::path p = fs::path(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();  // "ckpt/" -> "ckpt"
  return p;
}

fs::path sibling(const fs::path& dir, const char* suffix) { return fs::path(dir.string() + suffix); }

std::string manifest_of(const Files& files) {
  std::ostringstream os;
  os << "xlaunch-checkpoint " << kFormatVersion << "\n";
  for (const auto& [path, bytes] : files) {
    char crc[16];
    std::snprintf(crc, sizeof crc, "%08x", crc32_of(bytes));
    os << crc << " " << bytes.size() << " " << path << "\n";
  }
  return os.str();
}

void write_tree(const fs::path& tmp, const Files& files) {
  remove_tree(tmp);  // left over by a save that was killed
  std::error_code ec;
  if (!fs::create_directories(tmp, ec) && ec) throw Error("cannot create " + tmp.string() + ": " + ec.message());
  std::set<fs::path> dirs{tmp};
  for (const auto& [path, bytes] : files) {
    const fs::path target = tmp / path;
    if (dirs.insert(target.parent_path()).second) fs::create_directories(target.parent_path());
    write_file(target, bytes);
    notify("wrote " + path);
  }
  write_file(tmp / "MANIFEST", manifest_of(files));
  notify("wrote MANIFEST");
  for (const auto& d : dirs) fsync_dir(d);
}

}  // namespace

void set_save_hook(std::function<void(const std::string&)> hook) { save_hook() = std::move(hook); }

void write_atomically(const std::string& dir_text, const Files& files) {
  const fs::path dir = normalized(dir_text), tmp = sibling(dir, ".tmp"), old = sibling(dir, ".old");
  const fs::path parent = dir.has_parent_path() ? dir.parent_path() : fs::path(".");
  fs::create_directories(parent);
  if (fs::exists(dir) && !fs::exists(dir / "MANIFEST") && !is_empty_dir(dir))
    throw UsageError("save_state: " + dir.string() + " exists and is not an xlaunch checkpoint (no MANIFEST); "
                     "it would be replaced. Choose another directory, or remove it");
  write_tree(tmp, files);
  fsync_dir(parent);
  // Directories cannot replace each other in one rename: move the previous checkpoint aside
  // first. In between, <dir> is missing and <dir>.old is complete; read_verified falls back to it.
  // When <dir> is already missing, <dir>.old is the last complete checkpoint: keep it until the
  // new one is in place.
  if (fs::exists(dir)) {
    remove_tree(old);
    rename_path(dir, old);
    fsync_dir(parent);
    notify("moved previous aside");
  }
  rename_path(tmp, dir);
  fsync_dir(parent);
  notify("moved new into place");
  remove_tree(old);
  fsync_dir(parent);
}

Files read_verified(const std::string& dir_text, bool* fell_back) {
  fs::path dir = normalized(dir_text);
  const fs::path old = sibling(dir, ".old");
  if (fell_back) *fell_back = false;
  if (!fs::exists(dir)) {
    if (!fs::exists(old))
      throw UsageError("load_state: no checkpoint at " + dir.string() + " (the directory does not exist, nor " +
                       old.string() + "); pass the directory given to save_state");
    dir = old;
    if (fell_back) *fell_back = true;
  }
  const fs::path manifest_path = dir / "MANIFEST";
  if (!fs::exists(manifest_path))
    throw UsageError("load_state: " + dir.string() + " is not a complete xlaunch checkpoint: " +
                     manifest_path.string() + " is missing");
  std::istringstream manifest(read_file(manifest_path));
  std::string magic;
  int version = 0;
  manifest >> magic >> version;
  if (magic != "xlaunch-checkpoint" || version != kFormatVersion)
    throw UsageError("load_state: " + manifest_path.string() + " is not an xlaunch checkpoint manifest of format " +
                     std::to_string(kFormatVersion) + " (it starts with '" + magic + " " + std::to_string(version) +
                     "')");
  Files files;
  std::string crc_text, path;
  size_t size = 0;
  while (manifest >> crc_text >> size >> path) {
    const fs::path file = dir / path;
    if (!fs::exists(file))
      throw UsageError("load_state: checkpoint " + dir.string() + " is corrupt: " + file.string() + " is missing");
    std::string bytes = read_file(file);
    char crc[16];
    std::snprintf(crc, sizeof crc, "%08x", crc32_of(bytes));
    if (bytes.size() != size || crc_text != crc)
      throw UsageError("load_state: checkpoint " + dir.string() + " is corrupt: " + file.string() + " has " +
                       std::to_string(bytes.size()) + " bytes, CRC32 " + crc + "; its MANIFEST says " +
                       std::to_string(size) + " bytes, CRC32 " + crc_text);
    files.emplace(path, std::move(bytes));
  }
  if (!manifest.eof())
    throw UsageError("load_state: " + manifest_path.string() + " is corrupt (a line is not 'crc32 bytes path')");
  return files;
}

}  // namespace checkpoint

// ---- what the Accelerator saves ------------------------------------------------------------

namespace {

using checkpoint::Files;
using Named = std::vector<std::pair<std::string, at::Tensor>>;

std::string pickle_bytes(const Named& tensors) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [name, t] : tensors) dict.insert(name, t.detach().to(at::kCPU).clone());
  const std::vector<char> v = torch::jit::pickle_save(dict);
  return std::string(v.begin(), v.end());
}

Named unpickle(const Files& files, const std::string& path) {
  const auto it = files.find(path);
  if (it == files.end()) throw UsageError("load_state: the checkpoint has no " + path);
  Named out;
  try {
    const c10::IValue v = torch::jit::pickle_load(std::vector<char>(it->second.begin(), it->second.end()));
    for (const auto& e : v.toGenericDict()) out.emplace_back(e.key().toStringRef(), e.value().toTensor());
  } catch (const c10::Error& e) {
    throw UsageError("load_state: " + path + " in the checkpoint is not a tensor dictionary: " + e.what_without_backtrace());
  }
  return out;
}

Named model_state(const torch::nn::Module& m) {
  Named out;
  for (const auto& p : m.named_parameters()) out.emplace_back(p.key(), p.value());
  for (const auto& b : m.named_buffers())
    if (b.value().defined()) out.emplace_back(b.key(), b.value());
  return out;
}

std::string describe(const at::Tensor& t) {
  std::ostringstream os;
  os << t.sizes() << " " << at::toString(t.scalar_type());
  return os.str();
}

// Refuses a checkpoint of another model: the first entry that differs, with both descriptions.
void check_same_model(size_t id, const Named& mine, const Named& saved) {
  std::map<std::string, at::Tensor> by_name(saved.begin(), saved.end());
  for (const auto& [name, t] : mine) {
    const auto it = by_name.find(name);
    std::string theirs = it == by_name.end() ? "no such entry" : describe(it->second);
    if (it != by_name.end() && theirs == describe(t)) continue;
    throw UsageError("load_state: the checkpoint was made for another model: model " + std::to_string(id) + " '" +
                     name + "' is " + describe(t) + " here, and " + theirs +
                     " in the checkpoint. Build the model the checkpoint was saved from (same "
                     "constructor arguments), or start without load_state");
  }
  if (saved.size() != mine.size())
    for (const auto& [name, t] : saved)
      if (std::none_of(mine.begin(), mine.end(), [&](const auto& e) { return e.first == name; }))
        throw UsageError("load_state: the checkpoint was made for another model: it holds model " + std::to_string(id) +
                         " '" + name + "' " + describe(t) + ", which this model does not have");
}

std::string rng_bytes(const at::Device& device) {
  Named states;
  {
    at::Generator cpu = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(cpu.mutex());
    states.emplace_back("cpu", cpu.get_state());
  }
  if (device.is_cuda() && torch::cuda::is_available()) {
    at::Generator gen = at::globalContext().defaultGenerator(device);
    std::lock_guard<std::mutex> lock(gen.mutex());
    states.emplace_back("cuda", gen.get_state());
  }
  return pickle_bytes(states);
}

void restore_rng(const Named& states, const at::Device& device) {
  for (const auto& [name, t] : states) {
    if (name == "cuda" && !(device.is_cuda() && torch::cuda::is_available())) continue;
    at::Generator gen = name == "cpu" ? at::detail::getDefaultCPUGenerator() : at::globalContext().defaultGenerator(device);
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(t);
  }
}

std::string env_text() {
  std::ostringstream os;
  for (const env::Var* v : env::kAll) os << v->name << "=" << env::raw(*v) << "\n";
  return os.str();
}

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string host_name() {
  char name[256] = {};
  return gethostname(name, sizeof name - 1) == 0 ? name : "unknown-host";
}

// "key value" lines; the values have no spaces.
using KeyValues = std::map<std::string, std::string>;

std::string key_values_text(const KeyValues& kv) {
  std::ostringstream os;
  for (const auto& [k, v] : kv) os << k << " " << v << "\n";
  return os.str();
}

KeyValues parse_key_values(const std::string& text) {
  KeyValues kv;
  std::istringstream in(text);
  for (std::string k, v; in >> k >> v;) kv[k] = v;
  return kv;
}

int64_t get_int(const KeyValues& kv, const std::string& key) {
  const auto it = kv.find(key);
  if (it == kv.end()) throw UsageError("load_state: rank0/trainer_state.txt in the checkpoint has no '" + key + "'");
  return std::stoll(it->second);
}

std::string exact(double x) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

// Broadcasts rank 0's bytes (a length, then the bytes); returns them on every rank.
std::string broadcast_bytes(Communicator& comm, const std::string& mine) {
  if (comm.size() == 1) return mine;
  at::Tensor n = at::empty({1}, at::kLong);
  n.fill_(static_cast<int64_t>(mine.size()));
  comm.broadcast(n, 0);
  const int64_t len = n.item<int64_t>();
  at::Tensor bytes = at::empty({len}, at::kByte);
  if (comm.rank() == 0 && len > 0) std::memcpy(bytes.data_ptr(), mine.data(), len);
  if (len > 0) comm.broadcast(bytes, 0);
  return std::string(static_cast<const char*>(bytes.data_ptr()), len);
}

Files broadcast_files(Communicator& comm, const Files& mine) {
  if (comm.size() == 1) return mine;
  const int64_t count = std::stoll(broadcast_bytes(comm, std::to_string(mine.size())));
  Files out;
  auto it = mine.begin();
  for (int64_t i = 0; i < count; ++i) {
    std::string path = broadcast_bytes(comm, comm.rank() == 0 ? it->first : "");
    out[path] = broadcast_bytes(comm, comm.rank() == 0 ? it->second : "");
    if (comm.rank() == 0) ++it;
  }
  return out;
}

void log_main(int rank, const std::string& line) {
  if (rank == 0) std::cerr << "[xlaunch] " << line << std::endl;
}

// The XLAUNCH_* settings that differ from those the checkpoint was saved with ("" when none).
// Per-launch values (run id, restarts, log dir, config file name) are expected to change.
std::string changed_settings(const Files& files) {
  const auto it = files.find("config/env.txt");
  if (it == files.end()) return "";
  std::map<std::string, std::string> saved;
  std::istringstream in(it->second);
  for (std::string line; std::getline(in, line);)
    if (const auto eq = line.find('='); eq != std::string::npos) saved[line.substr(0, eq)] = line.substr(eq + 1);
  std::string out;
  for (const env::Var* v : env::kAll) {
    if (v == &env::kRunId || v == &env::kRestartCount || v == &env::kLogDir || v == &env::kConfigFile) continue;
    const auto s = saved.find(v->name);
    if (s != saved.end() && s->second != env::raw(*v))
      out += std::string(out.empty() ? "" : ", ") + v->name + " was '" + s->second + "', now '" + env::raw(*v) + "'";
  }
  return out;
}

}  // namespace

// ---- save ----------------------------------------------------------------------------------

void Accelerator::save_state(const std::string& dir) {
  if (micro_step_ % options_.gradient_accumulation_steps != 0)
    log_main(rank_, "save_state: called in the middle of gradient accumulation (micro-step " +
                    std::to_string(micro_step_) + ", a sync every " + std::to_string(options_.gradient_accumulation_steps) +
                    "); the gradients accumulated so far are not saved. Save after an optimizer step for an exact resume");
  // Every rank's generators differ (dropout masks, device_specific seeds): rank 0 writes them all.
  const std::vector<std::string> rng = cpu_comm_->allgather_strings(rng_bytes(device_));
  std::string error;
  if (rank_ == 0) {
    try {
      checkpoint::write_atomically(dir, checkpoint_files(rng));
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  // The outcome doubles as the barrier: nobody returns before the checkpoint exists.
  error = broadcast_bytes(*cpu_comm_, error);
  if (!error.empty()) throw Error("save_state(" + dir + ") failed on rank 0: " + error);
}

Files Accelerator::checkpoint_files(const std::vector<std::string>& rng) {
  Files files;
  KeyValues state{{"format_version", std::to_string(checkpoint::kFormatVersion)},
                  {"world_size", std::to_string(world_)},
                  {"step", std::to_string(step_)},
                  {"micro_step", std::to_string(micro_step_)},
                  {"models", std::to_string(models_.size())},
                  {"optimizers", std::to_string(optimizers_.size())},
                  {"loaders", std::to_string(loaders_.size())},
                  {"scaler", scaler_ ? "1" : "0"}};
  std::ostringstream meta;
  meta << "xlaunch checkpoint\nformat_version " << checkpoint::kFormatVersion << "\nworld_size " << world_
       << "\nsaved_by rank 0 on " << host_name() << "\ntime " << utc_now() << "\nstep " << step_
       << "\nmicro_step " << micro_step_ << "\n";
  for (size_t i = 0; i < models_.size(); ++i) {
    const Named named = model_state(*models_[i].module);
    files["rank0/model_" + std::to_string(i) + ".pt"] = pickle_bytes(named);
    for (const auto& [name, t] : named) meta << "model " << i << " '" << name << "' " << describe(t) << "\n";
  }
  for (size_t i = 0; i < optimizers_.size(); ++i) {
    torch::serialize::OutputArchive archive;
    optimizers_[i]->inner().save(archive);
    std::ostringstream os;
    archive.save_to(os);
    files["rank0/optimizer_" + std::to_string(i) + ".pt"] = os.str();
  }
  for (size_t i = 0; i < loaders_.size(); ++i) {
    const Loader& l = *loaders_[i];
    const LoaderPosition pos = l.position();
    const std::string k = "loader." + std::to_string(i) + ".";
    state[k + "epoch"] = std::to_string(pos.epoch);
    state[k + "batch"] = std::to_string(pos.batch);
    state[k + "num_batches"] = std::to_string(l.num_batches());
    meta << "loader " << i << " epoch " << pos.epoch << " next batch " << pos.batch << " of " << l.num_batches() << "\n";
  }
  if (scaler_) {
    const GradScalerState s = scaler_->state_dict();
    state["scaler.scale"] = exact(s.scale);
    state["scaler.growth_factor"] = exact(s.growth_factor);
    state["scaler.backoff_factor"] = exact(s.backoff_factor);
    state["scaler.growth_interval"] = std::to_string(s.growth_interval);
    state["scaler.growth_tracker"] = std::to_string(s.growth_tracker);
    meta << "scaler scale " << exact(s.scale) << "\n";
  }
  for (size_t r = 0; r < rng.size(); ++r) files["rng/rank_" + std::to_string(r) + ".pt"] = rng[r];
  files["rank0/trainer_state.txt"] = key_values_text(state);
  files["metadata.txt"] = meta.str();
  files["config/env.txt"] = env_text();
  const std::string config_file = env::raw(env::kConfigFile);
  if (!config_file.empty()) {
    std::ifstream in(config_file, std::ios::binary);
    std::ostringstream os;
    if (in) os << in.rdbuf();
    files["config/config_file.yaml"] = in ? os.str() : "# " + config_file + " could not be read when saving\n";
  }
  return files;
}

// ---- load ----------------------------------------------------------------------------------

void Accelerator::load_state(const std::string& dir) {
  Files files;
  std::string error;
  bool fell_back = false;
  if (rank_ == 0) {
    try {
      files = checkpoint::read_verified(dir, &fell_back);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  error = broadcast_bytes(*cpu_comm_, error);
  if (!error.empty()) throw UsageError(error);
  if (fell_back)
    log_main(rank_, "load_state: " + dir + " is missing; loading " + dir + ".old, the previous checkpoint that an "
                    "interrupted save_state left in place");
  files = broadcast_files(*cpu_comm_, files);
  restore_checkpoint(files);
  if (const std::string changed = changed_settings(files); !changed.empty())
    log_main(rank_, "load_state: this run's settings differ from those the checkpoint was saved with: " + changed);
}

namespace {

void check_count(const KeyValues& state, const char* what, size_t mine) {
  const int64_t saved = get_int(state, what);
  if (saved != static_cast<int64_t>(mine))
    throw UsageError("load_state: the checkpoint holds " + std::to_string(saved) + " " + what + ", this program prepared " +
                     std::to_string(mine) + ". Prepare the same models, optimizers and loaders, in the same order, "
                     "before calling load_state");
}

}  // namespace

// Everything is validated before anything is changed: a refused checkpoint leaves the run as it was.
void Accelerator::restore_checkpoint(const Files& files) {
  const auto state_it = files.find("rank0/trainer_state.txt");
  if (state_it == files.end()) throw UsageError("load_state: the checkpoint has no rank0/trainer_state.txt");
  const KeyValues state = parse_key_values(state_it->second);
  if (get_int(state, "format_version") != checkpoint::kFormatVersion)
    throw UsageError("load_state: checkpoint format " + state.at("format_version") + ", this xlaunch reads " +
                     std::to_string(checkpoint::kFormatVersion));
  check_count(state, "models", models_.size());
  check_count(state, "optimizers", optimizers_.size());
  check_count(state, "loaders", loaders_.size());
  std::vector<Named> saved_models;
  for (size_t i = 0; i < models_.size(); ++i) {
    saved_models.push_back(unpickle(files, "rank0/model_" + std::to_string(i) + ".pt"));
    check_same_model(i, model_state(*models_[i].module), saved_models.back());
  }
  std::vector<std::unique_ptr<torch::serialize::InputArchive>> saved_optimizers;
  for (size_t i = 0; i < optimizers_.size(); ++i) {
    const std::string path = "rank0/optimizer_" + std::to_string(i) + ".pt";
    const auto it = files.find(path);
    if (it == files.end()) throw UsageError("load_state: the checkpoint has no " + path);
    saved_optimizers.push_back(std::make_unique<torch::serialize::InputArchive>());
    std::istringstream in(it->second);
    saved_optimizers.back()->load_from(in, device_);
  }
  const int64_t saved_world = get_int(state, "world_size");
  const std::string rng_path = "rng/rank_" + std::to_string(rank_) + ".pt";
  const bool have_rng = files.count(rng_path) > 0;
  const Named rng = have_rng ? unpickle(files, rng_path) : Named{};

  {
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < models_.size(); ++i) {
      std::map<std::string, at::Tensor> by_name(saved_models[i].begin(), saved_models[i].end());
      for (auto& [name, t] : model_state(*models_[i].module)) t.detach().copy_(by_name.at(name));
    }
  }
  for (size_t i = 0; i < optimizers_.size(); ++i) {
    try {
      optimizers_[i]->inner().load(*saved_optimizers[i]);
    } catch (const c10::Error& e) {
      throw UsageError("load_state: optimizer " + std::to_string(i) + " does not match the checkpoint's (build the "
                       "same optimizer type over the same parameters): " + e.what_without_backtrace());
    }
  }
  step_ = get_int(state, "step");
  micro_step_ = get_int(state, "micro_step");
  restore_scaler(state);
  restore_loaders(state, saved_world);
  if (have_rng) restore_rng(rng, device_);
  if (saved_world != world_)
    log_main(rank_, "load_state: the checkpoint was saved by " + std::to_string(saved_world) + " processes, this job has " +
                    std::to_string(world_) + ". Restored: models, optimizers, GradScaler, step counters" +
                    (world_ > saved_world ? "; ranks " + std::to_string(saved_world) + ".." + std::to_string(world_ - 1) +
                                                " keep their own RNG state (none was saved for them)"
                                          : "") +
                    ". The resume is not bitwise exact (another world size reduces in another order)");
}

void Accelerator::restore_scaler(const std::map<std::string, std::string>& state) {
  const bool saved = get_int(state, "scaler") != 0;
  if (saved && scaler_) {
    GradScalerState s;
    s.scale = std::stod(state.at("scaler.scale"));
    s.growth_factor = std::stod(state.at("scaler.growth_factor"));
    s.backoff_factor = std::stod(state.at("scaler.backoff_factor"));
    s.growth_interval = get_int(state, "scaler.growth_interval");
    s.growth_tracker = get_int(state, "scaler.growth_tracker");
    scaler_->load_state_dict(s);
  } else if (saved) {
    log_main(rank_, "load_state: the checkpoint has a GradScaler state (it was saved under fp16); this run has no "
                    "scaler (mixed_precision " + options_.mixed_precision + "), so it is ignored");
  } else if (scaler_) {
    log_main(rank_, "load_state: the checkpoint has no GradScaler state (it was not saved under fp16); the scaler "
                    "starts afresh");
  }
}

// A position within an epoch counts this world size's batches of this rank's shard: with another
// world size (or batch count) it names other samples, so the interrupted epoch restarts.
void Accelerator::restore_loaders(const std::map<std::string, std::string>& state, int64_t saved_world) {
  for (size_t i = 0; i < loaders_.size(); ++i) {
    const std::string k = "loader." + std::to_string(i) + ".";
    LoaderPosition pos{get_int(state, k + "epoch"), get_int(state, k + "batch")};
    const int64_t saved_batches = get_int(state, k + "num_batches");
    if (pos.batch > 0 && (saved_world != world_ || saved_batches != loaders_[i]->num_batches())) {
      log_main(rank_, "load_state: loader " + std::to_string(i) + " was saved at batch " + std::to_string(pos.batch) +
                      " of " + std::to_string(saved_batches) + " in epoch " + std::to_string(pos.epoch) + " with " +
                      std::to_string(saved_world) + " processes; this job has " + std::to_string(world_) +
                      " processes and " + std::to_string(loaders_[i]->num_batches()) +
                      " batches per epoch, so the position cannot carry over: epoch " + std::to_string(pos.epoch) +
                      " restarts from its first batch");
      pos.batch = 0;
    }
    loaders_[i]->set_position(pos);
  }
}

}  // namespace xlaunch
