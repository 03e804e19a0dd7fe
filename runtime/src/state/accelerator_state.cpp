// Accelerator::save_state / load_state (the format: checkpoint_dir.h, docs/checkpointing.md).
//
// Who does what: every rank sends its RNG state to rank 0, which alone writes the directory; the
// ranks then agree on the outcome (comm/agree.h), so every rank returns only once the checkpoint
// exists, and a failed write throws the same error on every rank instead of hanging. On load,
// rank 0 reads and verifies the files and broadcasts them, so the directory need only be visible
// to rank 0, and every rank validates the same bytes (a refusal happens everywhere). At ZeRO
// stage >= 1 every rank's optimizer file travels to rank 0 the same way (one rank at a time), and on
// load each rank re-slices its own part (state/zero_state.h), the ranks agreeing on any refusal.
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <fstream>
#include <iostream>
#include <sstream>

#include "comm/agree.h"
#include "ddp/accumulation.h"
#include "state/checkpoint_dir.h"
#include "state/loader_state.h"
#include "state/log_main.h"
#include "state/named_checkpoints.h"
#include "state/trainer_state.h"
#include "state/torch_state.h"
#include "state/zero_state.h"
#include "watch/watchdog.h"
#include "xlaunch/accelerator.h"
#include "xlaunch/env_vars.h"
#include "xlaunch/error.h"

namespace xlaunch {

// ---- what the Accelerator saves ------------------------------------------------------------

namespace {

using checkpoint::Files;
using Named = NamedTensors;
using checkpoint::KeyValues;
using checkpoint::exact;
using checkpoint::get_int;
using checkpoint::key_values_text;
using checkpoint::parse_key_values;

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

template <typename Fn>
std::string archive_bytes(Fn&& fill) {
  torch::serialize::OutputArchive archive;
  fill(archive);
  std::ostringstream os;
  archive.save_to(os);
  return os.str();
}

Files broadcast_files(Communicator& comm, const Files& mine) {
  if (comm.size() == 1) return mine;
  const int64_t count = std::stoll(broadcast_string(comm, std::to_string(mine.size())));
  Files out;
  auto it = mine.begin();
  for (int64_t i = 0; i < count; ++i) {
    std::string path = broadcast_string(comm, comm.rank() == 0 ? it->first : "");
    out[path] = broadcast_string(comm, comm.rank() == 0 ? it->second : "");
    if (comm.rank() == 0) ++it;
  }
  return out;
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
    // Per run, not settings: every run has its own (the status directory is made per run).
    if (v == &env::kRunId || v == &env::kRestartCount || v == &env::kLogDir || v == &env::kConfigFile ||
        v == &env::kResume || v == &env::kStatusDir) continue;
    const auto s = saved.find(v->name);
    if (s != saved.end() && s->second != env::raw(*v))
      out += std::string(out.empty() ? "" : ", ") + v->name + " was '" + s->second + "', now '" + env::raw(*v) + "'";
  }
  return out;
}

}  // namespace

// What a checkpoint holds of an Accelerator, and putting it back (the Accelerator's friend).
struct CheckpointIO {
  // A sharded optimizer's state (ZeRO stage >= 1), on rank 0: every rank's optimizer file, and
  // every rank's pieces (checkpoint::rank_layout_text). Empty for an optimizer that is not sharded.
  struct OptimizerShards {
    std::vector<std::string> files;
    std::string pieces;
  };
  // hook_states[i][r]: rank r's communication-hook state of model i, pickled (empty: none).
  // stream_states[r]: rank r's streaming loaders' positions (empty: no loader streams).
  static Files files_of(const Accelerator& a, const std::vector<std::string>& rng_states,
                        const std::vector<std::vector<std::string>>& hook_states,
                        const std::vector<std::string>& stream_states, const std::vector<OptimizerShards>& shards);
  // Every rank's hook state of every model, on rank 0 (collective).
  static std::vector<std::vector<std::string>> gather_hook_states(Accelerator& a);
  // Every rank's state of every sharded optimizer, on rank 0 (collective).
  static std::vector<OptimizerShards> gather_optimizer_shards(Accelerator& a);
  static checkpoint::Reducers reducers_of(const Accelerator& a);
  // The archive each optimizer loads: the saved one, or at another world size or stage (either
  // side sharded) this rank's state re-sliced from the saved pieces. Collective: a refusal on any
  // rank is every rank's. `checkpoint` names it in messages.
  static std::vector<std::unique_ptr<torch::serialize::InputArchive>> optimizer_archives(
      Accelerator& a, const Files& files, const KeyValues& state, const std::string& checkpoint);
  // The saved hook state each model takes on this rank; throws UsageError when one does not fit.
  static std::vector<Named> hook_states_to_restore(const Accelerator& a, const Files& files, int64_t saved_world);
  // Everything is validated before anything is changed: a refused checkpoint leaves the run as it was.
  static void restore(Accelerator& a, const Files& files, const std::string& checkpoint);
  static void restore_scaler(Accelerator& a, const KeyValues& state);
  // "scheduler <i> <name>" and "custom <i> <type>" lines: what was prepared and registered.
  static std::string registered_text(const Accelerator& a);
  // Refuses a checkpoint whose schedulers or registered objects differ in number or kind.
  static void check_registered(const Accelerator& a, const Files& files);
  static std::unique_ptr<torch::serialize::InputArchive> archive_of(const Files& files, const std::string& path,
                                                                    const at::Device& device);
};

// ---- save ----------------------------------------------------------------------------------

void Accelerator::save_state(const std::string& dir) {
  if (micro_step_ % options_.gradient_accumulation_steps != 0)
    log_main(rank_, "save_state: called in the middle of gradient accumulation (micro-step " +
                    std::to_string(micro_step_) + ", a sync every " + std::to_string(options_.gradient_accumulation_steps) +
                    "); the gradients accumulated so far are not saved. Save after an optimizer step for an exact resume");
  // A save inside the loop holds the schedule of the step it saves (PreparedScheduler).
  for (auto& s : schedulers_) s->catch_up();
  // The logs reach the step saved before the checkpoint does (docs/tracking.md).
  drain_trackers();
  // Every rank's generators differ (dropout masks, device_specific seeds): rank 0 writes them all.
  const std::vector<std::string> rng = cpu_comm_->allgather_strings(rng_bytes(device_));
  const auto hook_states = CheckpointIO::gather_hook_states(*this);
  const auto shards = CheckpointIO::gather_optimizer_shards(*this);
  // Streaming loaders stand differently on every rank (loader_state.h).
  const std::vector<std::string> streams =
      checkpoint::any_stream(loaders_)
          ? cpu_comm_->allgather_strings(checkpoint::stream_positions_text(loaders_, rank_, world_))
          : std::vector<std::string>{};
  std::string error;
  if (rank_ == 0) {
    try {
      checkpoint::write_atomically(dir, CheckpointIO::files_of(*this, rng, hook_states, streams, shards));
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  // The outcome doubles as the barrier: nobody returns before the checkpoint exists.
  const Agreement outcome = agree_on_error(*cpu_comm_, error);
  if (outcome.failed()) throw Error("save_state(" + dir + ") failed on rank 0: " + outcome.message);
}

std::vector<std::vector<std::string>> CheckpointIO::gather_hook_states(Accelerator& a) {
  std::vector<std::vector<std::string>> out(a.models_.size());
  for (size_t i = 0; i < a.models_.size(); ++i) {
    const Named state = a.models_[i].reducer->hook_state();
    if (state.empty()) continue;  // the same on every rank: the hook is one of the agreed settings
    const std::string mine = pickle_bytes(state);
    // One rank at a time, as a broadcast: the error feedback is as large as the weight matrices,
    // beyond what one allgather may carry.
    for (int r = 0; r < a.world_; ++r) {
      std::string got = r == 0 ? mine : broadcast_string(*a.cpu_comm_, a.rank_ == r ? mine : std::string(), r);
      if (a.rank_ == 0) out[i].push_back(std::move(got));
    }
  }
  return out;
}

checkpoint::Reducers CheckpointIO::reducers_of(const Accelerator& a) {
  checkpoint::Reducers out;
  for (const auto& m : a.models_) out.push_back(m.reducer.get());
  return out;
}

std::vector<CheckpointIO::OptimizerShards> CheckpointIO::gather_optimizer_shards(Accelerator& a) {
  std::vector<OptimizerShards> out(a.optimizers_.size());
  for (size_t i = 0; i < a.optimizers_.size(); ++i) {
    PreparedOptimizer& opt = *a.optimizers_[i];
    if (!opt.sharded_) continue;  // the same on every rank: zero_stage is an agreed setting
    const std::string mine = archive_bytes([&](auto& ar) { opt.inner().save(ar); });
    std::vector<std::vector<checkpoint::PieceLayout>> pieces;
    for (const auto& group : checkpoint::held_tensors(opt.inner(), opt.sharded(), reducers_of(a))) {
      pieces.emplace_back();
      for (const auto& h : group) pieces.back().push_back(h.layout);
    }
    const std::string my_pieces = checkpoint::rank_layout_text(a.rank_, pieces);
    // One rank at a time, as a broadcast (as gather_hook_states): all of them at once could be
    // the size of the whole unsharded state.
    for (int r = 0; r < a.world_; ++r) {
      std::string file = r == 0 ? mine : broadcast_string(*a.cpu_comm_, a.rank_ == r ? mine : std::string(), r);
      std::string text = r == 0 ? my_pieces : broadcast_string(*a.cpu_comm_, a.rank_ == r ? my_pieces : std::string(), r);
      if (a.rank_ != 0) continue;
      out[i].files.push_back(std::move(file));
      out[i].pieces += text;
    }
  }
  return out;
}

Files CheckpointIO::files_of(const Accelerator& a, const std::vector<std::string>& rng,
                             const std::vector<std::vector<std::string>>& hook_states,
                             const std::vector<std::string>& stream_states, const std::vector<OptimizerShards>& shards) {
  Files files;
  KeyValues state{{"format_version", std::to_string(checkpoint::kFormatVersion)},
                  {"world_size", std::to_string(a.world_)},
                  {"zero_stage", std::to_string(a.options_.ddp.zero_stage)},
                  {"step", std::to_string(a.step_)},
                  {"micro_step", std::to_string(a.micro_step_)},
                  {"models", std::to_string(a.models_.size())},
                  {"optimizers", std::to_string(a.optimizers_.size())},
                  {"loaders", std::to_string(a.loaders_.size())},
                  {"scaler", a.scaler_ ? "1" : "0"},
                  {"schedulers", std::to_string(a.schedulers_.size())},
                  {"custom_objects", std::to_string(a.custom_.size())}};
  std::ostringstream meta;
  meta << "xlaunch checkpoint\nformat_version " << checkpoint::kFormatVersion << "\nworld_size " << a.world_
       << "\nzero_stage " << a.options_.ddp.zero_stage << "\nsaved_by rank 0 on " << host_name() << "\ntime " << utc_now() << "\nstep " << a.step_
       << "\nmicro_step " << a.micro_step_ << "\n";
  for (size_t i = 0; i < a.models_.size(); ++i) {
    const Named named = model_state(*a.models_[i].module);
    files["rank0/model_" + std::to_string(i) + ".pt"] = pickle_bytes(named);
    for (const auto& [name, t] : named) meta << "model " << i << " '" << name << "' " << describe(t) << "\n";
  }
  for (size_t i = 0; i < a.optimizers_.size(); ++i) {
    PreparedOptimizer& opt = *a.optimizers_[i];
    state["optimizer." + std::to_string(i) + ".steps"] = std::to_string(opt.steps_);
    if (!opt.sharded_) {
      files["rank0/optimizer_" + std::to_string(i) + ".pt"] = archive_bytes([&](auto& ar) { opt.inner().save(ar); });
      continue;
    }
    // Sharded: every rank's file, and what their pieces hold (state/sharded_layout.h).
    const std::string dir = "optimizer_" + std::to_string(i) + "/";
    for (size_t r = 0; r < shards[i].files.size(); ++r) files[dir + "rank_" + std::to_string(r) + ".pt"] = shards[i].files[r];
    checkpoint::OptimizerLayout layout;
    layout.world = a.world_;
    layout.stage = a.options_.ddp.zero_stage;
    layout.groups = static_cast<int>(opt.inner().param_groups().size());
    layout.params = checkpoint::params_of(opt.inner(), opt.sharded(), reducers_of(a));
    files[dir + "layout.txt"] = checkpoint::layout_text(layout) + shards[i].pieces;
    meta << "optimizer " << i << " sharded over " << a.world_ << " ranks (zero_stage " << layout.stage << ")\n";
  }
  files["rank0/registered.txt"] = registered_text(a);
  for (size_t i = 0; i < a.schedulers_.size(); ++i) {
    const PreparedScheduler& s = *a.schedulers_[i];
    files["rank0/scheduler_" + std::to_string(i) + ".pt"] = archive_bytes([&](auto& ar) { s.inner_->save(ar); });
    state["scheduler." + std::to_string(i) + ".followed"] = std::to_string(s.followed_);
    meta << "scheduler " << i << " " << s.inner_->name() << " lr";
    for (double lr : s.inner_->last_lr()) meta << " " << exact(lr);
    meta << "\n";
  }
  for (size_t i = 0; i < a.custom_.size(); ++i)
    files["rank0/custom_" + std::to_string(i) + ".pt"] = archive_bytes([&](auto& ar) { a.custom_[i]->save(ar); });
  checkpoint::save_loader_positions(a.loaders_, a.world_, state, meta, stream_states);
  // What backward(loss_sum, num_items) divides by next (ddp/accumulation.h): a resume divides alike.
  state["accumulation.items_reference"] = exact(a.items_->reference());
  if (a.scaler_) {
    const GradScalerState s = a.scaler_->state_dict();
    state["scaler.scale"] = exact(s.scale);
    state["scaler.growth_factor"] = exact(s.growth_factor);
    state["scaler.backoff_factor"] = exact(s.backoff_factor);
    state["scaler.growth_interval"] = std::to_string(s.growth_interval);
    state["scaler.growth_tracker"] = std::to_string(s.growth_tracker);
    meta << "scaler scale " << exact(s.scale) << "\n";
  }
  for (size_t r = 0; r < rng.size(); ++r) files["rng/rank_" + std::to_string(r) + ".pt"] = rng[r];
  for (size_t i = 0; i < hook_states.size(); ++i)
    for (size_t r = 0; r < hook_states[i].size(); ++r)
      files["ddp/model_" + std::to_string(i) + "_rank_" + std::to_string(r) + ".pt"] = hook_states[i][r];
  if (!hook_states.empty() && !hook_states.front().empty())
    meta << "comm_hook " << a.options_.ddp.comm_hook << " rank " << a.options_.ddp.powersgd_rank << "\n";
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
  const auto t0 = std::chrono::steady_clock::now();
  Files files;
  std::string error;
  bool fell_back = false;
  std::string chosen = dir;
  if (rank_ == 0) {
    try {
      if (dir == "latest") {
        files = checkpoint::read_latest(options_.project_dir, &chosen, [](const std::string& path, const std::string& why) {
          std::cerr << "[xlaunch] warning: load_state(\"latest\"): skipping " << path << ", which is torn: " << why
                    << std::endl;
        });
      } else {
        files = checkpoint::read_verified(dir, &fell_back);
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  const Agreement outcome = agree_on_error(*cpu_comm_, error);
  if (outcome.failed()) throw UsageError(outcome.message);
  if (dir == "latest") log_main(rank_, "load_state: loading " + chosen + ", the newest complete checkpoint");
  if (fell_back)
    log_main(rank_, "load_state: " + dir + " is missing; loading " + dir + ".old, the previous checkpoint that an "
                    "interrupted save_state left in place");
  files = broadcast_files(*cpu_comm_, files);
  CheckpointIO::restore(*this, files, fell_back ? chosen + ".old" : chosen);
  if (const std::string changed = changed_settings(files); !changed.empty())
    log_main(rank_, "load_state: this run's settings differ from those the checkpoint was saved with: " + changed);
  boundary_pending_ = false;
  track_loaded(dir == "latest" ? chosen : dir);
  load_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
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

void CheckpointIO::restore(Accelerator& a, const Files& files, const std::string& checkpoint) {
  const auto state_it = files.find("rank0/trainer_state.txt");
  if (state_it == files.end()) throw UsageError("load_state: the checkpoint has no rank0/trainer_state.txt");
  const KeyValues state = parse_key_values(state_it->second);
  if (get_int(state, "format_version") != checkpoint::kFormatVersion)
    throw UsageError("load_state: checkpoint format " + state.at("format_version") + ", this xlaunch reads " +
                     std::to_string(checkpoint::kFormatVersion));
  check_count(state, "models", a.models_.size());
  check_count(state, "optimizers", a.optimizers_.size());
  check_count(state, "loaders", a.loaders_.size());
  checkpoint::check_loader_positions(a.loaders_, a.world_, state);
  std::vector<Named> saved_models;
  for (size_t i = 0; i < a.models_.size(); ++i) {
    saved_models.push_back(unpickle(files, "rank0/model_" + std::to_string(i) + ".pt"));
    check_same_model(i, model_state(*a.models_[i].module), saved_models.back());
  }
  // First among the checks whose outcome may differ by rank (each re-slices its own pieces).
  auto saved_optimizers = optimizer_archives(a, files, state, checkpoint);
  check_registered(a, files);
  std::vector<std::unique_ptr<torch::serialize::InputArchive>> saved_schedulers, saved_custom;
  for (size_t i = 0; i < a.schedulers_.size(); ++i)
    saved_schedulers.push_back(archive_of(files, "rank0/scheduler_" + std::to_string(i) + ".pt", a.device_));
  for (size_t i = 0; i < a.custom_.size(); ++i)
    saved_custom.push_back(archive_of(files, "rank0/custom_" + std::to_string(i) + ".pt", a.device_));
  const int64_t saved_world = get_int(state, "world_size");
  const std::vector<Named> hook_states = hook_states_to_restore(a, files, saved_world);
  const std::string rng_path = "rng/rank_" + std::to_string(a.rank_) + ".pt";
  const bool have_rng = files.count(rng_path) > 0;
  const Named rng = have_rng ? unpickle(files, rng_path) : Named{};

  {
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < a.models_.size(); ++i) {
      std::map<std::string, at::Tensor> by_name(saved_models[i].begin(), saved_models[i].end());
      for (auto& [name, t] : model_state(*a.models_[i].module)) t.detach().copy_(by_name.at(name));
    }
  }
  for (size_t i = 0; i < a.optimizers_.size(); ++i) {
    try {
      a.optimizers_[i]->inner().load(*saved_optimizers[i]);
    } catch (const c10::Error& e) {
      throw UsageError("load_state: optimizer " + std::to_string(i) + " does not match the checkpoint's (build the "
                       "same optimizer type over the same parameters): " + e.what_without_backtrace());
    }
  }
  for (size_t i = 0; i < a.optimizers_.size(); ++i) {
    const std::string key = "optimizer." + std::to_string(i) + ".steps";
    a.optimizers_[i]->steps_ = state.count(key) ? get_int(state, key) : 0;
  }
  // After the optimizers: a scheduler's load sets their learning rates.
  for (size_t i = 0; i < a.schedulers_.size(); ++i) {
    PreparedScheduler& s = *a.schedulers_[i];
    s.inner_->load(*saved_schedulers[i]);
    s.followed_ = get_int(state, "scheduler." + std::to_string(i) + ".followed");
  }
  for (size_t i = 0; i < a.custom_.size(); ++i) {
    try {
      a.custom_[i]->load(*saved_custom[i]);
    } catch (const c10::Error& e) {
      throw UsageError("load_state: registered object " + std::to_string(i) + " (" + a.custom_[i]->type_name() +
                       ") could not load its saved state: " + e.what_without_backtrace());
    }
  }
  for (size_t i = 0; i < a.models_.size(); ++i)
    if (!hook_states[i].empty()) a.models_[i].reducer->load_hook_state(hook_states[i]);
  a.step_ = get_int(state, "step");
  watch::set_step(a.step_);
  a.micro_step_ = get_int(state, "micro_step");
  if (state.count("accumulation.items_reference"))  // older checkpoints lack it: the first window divides by 1
    a.items_->set_reference(std::stod(state.at("accumulation.items_reference")));
  restore_scaler(a, state);
  checkpoint::restore_loader_positions(a.loaders_, a.world_, saved_world, state,
                                       [&](const std::string& line) { log_main(a.rank_, line); });
  if (have_rng) restore_rng(rng, a.device_);
  if (saved_world != a.world_)
    log_main(a.rank_, "load_state: the checkpoint was saved by " + std::to_string(saved_world) + " processes, this job has " +
                    std::to_string(a.world_) + ". Restored: models, optimizers, GradScaler, step counters" +
                    (a.world_ > saved_world ? "; ranks " + std::to_string(saved_world) + ".." + std::to_string(a.world_ - 1) +
                                                " keep their own RNG state (none was saved for them)"
                                          : "") +
                    ". The resume is not bitwise exact (another world size reduces in another order)");
}

std::vector<std::unique_ptr<torch::serialize::InputArchive>> CheckpointIO::optimizer_archives(
    Accelerator& a, const Files& files, const KeyValues& state, const std::string& checkpoint) {
  std::vector<std::unique_ptr<torch::serialize::InputArchive>> out;
  std::string error;
  try {
    const int64_t saved_world = get_int(state, "world_size");
    for (size_t i = 0; i < a.optimizers_.size(); ++i) {
      PreparedOptimizer& opt = *a.optimizers_[i];
      const std::string dir = "optimizer_" + std::to_string(i) + "/";
      const std::string whole = "rank0/optimizer_" + std::to_string(i) + ".pt";
      const bool sharded_saved = files.count(dir + "layout.txt") > 0;
      if (!sharded_saved && !opt.sharded_) {  // stage 0 on both sides: the file as it is
        out.push_back(archive_of(files, whole, a.device_));
        continue;
      }
      const std::string what = "optimizer " + std::to_string(i) + " of checkpoint " + checkpoint;
      const checkpoint::Reducers reducers = reducers_of(a);
      const auto mine = checkpoint::params_of(opt.inner(), opt.sharded(), reducers);
      const int groups = static_cast<int>(opt.inner().param_groups().size());
      checkpoint::OptimizerLayout saved;
      checkpoint::RankFile rank_file;
      if (sharded_saved) {
        saved = checkpoint::parse_layout(files.at(dir + "layout.txt"), checkpoint + "/" + dir + "layout.txt");
        checkpoint::check_same_params(saved, mine, groups, what);
        rank_file = [&](int r) { return archive_of(files, dir + "rank_" + std::to_string(r) + ".pt", a.device_); };
      } else {
        saved = checkpoint::whole_layout(mine, groups);
        rank_file = [&](int) { return archive_of(files, whole, a.device_); };
      }
      const auto held = checkpoint::held_tensors(opt.inner(), opt.sharded(), reducers);
      checkpoint::Resharded r = checkpoint::reshard(opt.inner(), held, saved, rank_file, a.device_, what);
      if (!r.note.empty()) log_main(a.rank_, "load_state: " + what + ": " + r.note);
      const int64_t from_world = sharded_saved ? saved.world : saved_world;
      const int64_t from_stage = sharded_saved ? saved.stage : 0;
      if (from_world != a.world_ || from_stage != a.options_.ddp.zero_stage) {
        log_main(a.rank_, "load_state: optimizer state of " + std::to_string(from_world) + " ranks at stage " +
                        std::to_string(from_stage) + " re-sliced for " + std::to_string(a.world_) + " ranks at stage " +
                        std::to_string(a.options_.ddp.zero_stage) + " (optimizer " + std::to_string(i) + ")");
      } else if (a.rank_ == 0) {
        bool same = true;
        for (size_t g = 0; g < held.size(); ++g) {
          std::vector<checkpoint::PieceLayout> layouts;
          for (const auto& h : held[g]) layouts.push_back(h.layout);
          same = same && layouts == saved.pieces[0][g];
        }
        if (!same)
          log_main(0, "load_state: optimizer state of " + std::to_string(from_world) + " ranks at stage " +
                      std::to_string(from_stage) + " re-sliced for this run's buckets, which differ from the saved "
                      "ones (bucket_cap_mb changed?) (optimizer " + std::to_string(i) + ")");
      }
      out.push_back(std::move(r.archive));
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  const Agreement outcome = agree_on_error(*a.cpu_comm_, error);
  if (outcome.failed()) throw UsageError(outcome.message);
  return out;
}

std::vector<Named> CheckpointIO::hook_states_to_restore(const Accelerator& a, const Files& files, int64_t saved_world) {
  std::vector<Named> out(a.models_.size());
  const std::string& hook = a.options_.ddp.comm_hook;
  for (size_t i = 0; i < a.models_.size(); ++i) {
    const Reducer& reducer = *a.models_[i].reducer;
    const std::string prefix = "ddp/model_" + std::to_string(i) + "_rank_";
    const bool saved = files.count(prefix + "0.pt") > 0;
    if (reducer.hook_state().empty()) {
      if (saved)
        log_main(a.rank_, "load_state: the checkpoint has communication-hook state for model " + std::to_string(i) +
                        "; this run's comm_hook is " + hook + ", so it is ignored");
      continue;
    }
    if (!saved) {
      log_main(a.rank_, "load_state: the checkpoint has no " + hook + " state for model " + std::to_string(i) +
                      " (saved with another comm_hook): its state and step count start afresh");
      continue;
    }
    // This rank's own state when the ranks are the same; otherwise rank 0's, of which the hook
    // keeps what all ranks share.
    const bool same_world = saved_world == a.world_;
    std::string note;
    Named state = reducer.hook_state_for_world(
        unpickle(files, prefix + (same_world ? std::to_string(a.rank_) : "0") + ".pt"), static_cast<int>(saved_world),
        a.world_, &note);
    if (!note.empty()) log_main(a.rank_, "load_state: " + note);
    const std::string why = reducer.hook_state_mismatch(state);
    if (!why.empty())
      throw UsageError("load_state: the checkpoint's " + hook + " state of model " + std::to_string(i) +
                       " does not fit this run: " + why + ". Resume with the ddp settings it was saved with "
                       "(config/env.txt in the checkpoint lists them), or from a checkpoint saved with comm_hook none");
    out[i] = std::move(state);
  }
  return out;
}

std::string CheckpointIO::registered_text(const Accelerator& a) {
  std::ostringstream os;
  for (size_t i = 0; i < a.schedulers_.size(); ++i) os << "scheduler " << i << " " << a.schedulers_[i]->inner_->name() << "\n";
  for (size_t i = 0; i < a.custom_.size(); ++i) os << "custom " << i << " " << a.custom_[i]->type_name() << "\n";
  return os.str();
}

namespace {

// "a (x), b (y)" of the lines of registered.txt that start with `kind`.
std::string kinds_listed(const std::string& text, const std::string& kind, size_t* count) {
  std::istringstream in(text);
  std::string out;
  *count = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.compare(0, kind.size() + 1, kind + " ") != 0) continue;
    const auto name = line.find(' ', kind.size() + 1);
    out += (out.empty() ? "" : ", ") + (name == std::string::npos ? std::string("?") : line.substr(name + 1));
    ++*count;
  }
  return out.empty() ? "none" : out;
}

}  // namespace

void CheckpointIO::check_registered(const Accelerator& a, const Files& files) {
  const auto it = files.find("rank0/registered.txt");
  const std::string saved = it == files.end() ? "" : it->second;  // checkpoints from before: none
  const std::string mine = registered_text(a);
  const struct {
    const char* kind;
    const char* what;
    const char* fix;
  } kinds[] = {{"scheduler", "prepared schedulers", "prepare the same schedulers (acc.prepare(scheduler))"},
               {"custom", "objects registered for checkpointing", "register the same objects "
                                                                 "(acc.register_for_checkpointing)"}};
  for (const auto& k : kinds) {
    size_t n_saved = 0, n_mine = 0;
    const std::string saved_list = kinds_listed(saved, k.kind, &n_saved);
    const std::string mine_list = kinds_listed(mine, k.kind, &n_mine);
    if (saved_list != mine_list)
      throw UsageError("load_state: the checkpoint holds " + std::to_string(n_saved) + " " + k.what + " (" + saved_list +
                       "), this program has " + std::to_string(n_mine) + " (" + mine_list + "). " + k.fix +
                       ", in the same order, before calling load_state");
  }
}

std::unique_ptr<torch::serialize::InputArchive> CheckpointIO::archive_of(const Files& files, const std::string& path,
                                                                         const at::Device& device) {
  const auto it = files.find(path);
  if (it == files.end()) throw UsageError("load_state: the checkpoint has no " + path);
  auto archive = std::make_unique<torch::serialize::InputArchive>();
  std::istringstream in(it->second);
  archive->load_from(in, device);
  return archive;
}

void CheckpointIO::restore_scaler(Accelerator& a, const KeyValues& state) {
  const bool saved = get_int(state, "scaler") != 0;
  if (saved && a.scaler_) {
    GradScalerState s;
    s.scale = std::stod(state.at("scaler.scale"));
    s.growth_factor = std::stod(state.at("scaler.growth_factor"));
    s.backoff_factor = std::stod(state.at("scaler.backoff_factor"));
    s.growth_interval = get_int(state, "scaler.growth_interval");
    s.growth_tracker = get_int(state, "scaler.growth_tracker");
    a.scaler_->load_state_dict(s);
  } else if (saved) {
    log_main(a.rank_, "load_state: the checkpoint has a GradScaler state (it was saved under fp16); this run has no "
                    "scaler (mixed_precision " + a.options_.mixed_precision + "), so it is ignored");
  } else if (a.scaler_) {
    log_main(a.rank_, "load_state: the checkpoint has no GradScaler state (it was not saved under fp16); the scaler "
                    "starts afresh");
  }
}

}  // namespace xlaunch
