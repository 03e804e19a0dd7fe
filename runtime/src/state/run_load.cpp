// load_run (state/training_run.h): rank 0 reads and verifies, every rank validates the same bytes
// and then restores its own part. Everything is validated before anything is changed: a refused
// checkpoint leaves the run as it was.
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "comm/agree.h"
#include "ddp/accumulation.h"
#include "optim/master_state.h"
#include "state/loader_state.h"
#include "state/log_main.h"
#include "state/model_shards.h"
#include "state/named_checkpoints.h"
#include "state/torch_state.h"
#include "state/training_run_parts.h"
#include "watch/watchdog.h"
#include "xlaunch/checkpoint_object.h"
#include "xlaunch/env_vars.h"
#include "xlaunch/error.h"
#include "xlaunch/grad_scaler.h"
#include "xlaunch/loader.h"
#include "xlaunch/lr_scheduler.h"

namespace xlaunch::checkpoint {
namespace {

using Named = NamedTensors;

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

void check_count(const KeyValues& state, const char* what, size_t mine) {
  const int64_t saved = get_int(state, what);
  if (saved != static_cast<int64_t>(mine))
    throw UsageError("load_state: the checkpoint holds " + std::to_string(saved) + " " + what + ", this program prepared " +
                     std::to_string(mine) + ". Prepare the same models, optimizers and loaders, in the same order, "
                     "before calling load_state");
}

void restore_scaler(TrainingRun& run, const KeyValues& state) {
  const bool saved = get_int(state, "scaler") != 0;
  if (saved && run.scaler) {
    GradScalerState s;
    s.scale = std::stod(state.at("scaler.scale"));
    s.growth_factor = std::stod(state.at("scaler.growth_factor"));
    s.backoff_factor = std::stod(state.at("scaler.backoff_factor"));
    s.growth_interval = get_int(state, "scaler.growth_interval");
    s.growth_tracker = get_int(state, "scaler.growth_tracker");
    run.scaler->load_state_dict(s);
  } else if (saved) {
    log_main(run.rank, "load_state: the checkpoint has a GradScaler state (it was saved under fp16); this run has no "
                    "scaler (mixed_precision " + run.mixed_precision + "), so it is ignored");
  } else if (run.scaler) {
    log_main(run.rank, "load_state: the checkpoint has no GradScaler state (it was not saved under fp16); the scaler "
                    "starts afresh");
  }
}

// The values this rank's part of every model takes: (tensor, its saved elements, flat), filled
// from the saved shards or whole entries (state/model_shards.h), on any world size and stage.
// Collective: a refusal on any rank is every rank's. Nothing is changed.
std::vector<std::pair<at::Tensor, at::Tensor>> model_values(const TrainingRun& run,
                                                              std::vector<std::unique_ptr<SavedModel>>& saved_models,
                                                              const std::string& checkpoint) {
  std::vector<std::pair<at::Tensor, at::Tensor>> out;
  std::string error;
  try {
    for (size_t i = 0; i < run.models.size(); ++i) {
      SavedModel& saved = *saved_models[i];
      for (HeldTensor& h : held_entries(*run.models[i].module, *run.models[i].reducer, i)) {
        if (const auto gap = saved.missing(h.layout))
          throw UsageError("load_state: checkpoint " + checkpoint + " does not hold " + *gap + " of model " +
                           std::to_string(i) + ": its sharded model layout (" + model_dir(i) +
                           "layout.txt) is damaged; resume from another checkpoint");
        at::Tensor values = saved.read(h.layout, h.tensor);
        out.emplace_back(std::move(h.tensor), std::move(values));
      }
      saved.release();
      const bool sharded_here = shards_params(*run.models[i].reducer);
      const int shards_here = run.models[i].reducer->shard_world();
      if (saved.sharded() && (saved.saved_world() != shards_here || !sharded_here))
        log_main(run.rank, "load_state: model " + std::to_string(i) + "'s parameters, saved as the shards of " +
                               std::to_string(saved.saved_world()) + " ranks (zero_stage 3), re-sliced for " +
                               std::to_string(shards_here) + " ranks at stage " + std::to_string(run.ddp.zero_stage) +
                               (shards_here < run.world ? " (ddp.shard_group machine)" : ""));
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  const Agreement outcome = agree_on_error(*run.comm, error);
  if (outcome.failed()) throw UsageError(outcome.message);
  return out;
}

// `disk`: where every rank sees the checkpoint, the model shards saved with block CRC32s are read
// from it in place, only their ranges this rank holds (fetch_rank_files left them out of `files`).
void restore(TrainingRun& run, const Files& files, const std::string& checkpoint, const CheckpointOnDisk* disk) {
  const auto state_it = files.find("rank0/trainer_state.txt");
  if (state_it == files.end()) throw UsageError("load_state: the checkpoint has no rank0/trainer_state.txt");
  const KeyValues state = parse_key_values(state_it->second);
  const int64_t format = get_int(state, "format_version");
  if (format != checkpoint::kFormatVersion && format != checkpoint::kPickledShardsFormatVersion &&
      format != checkpoint::kShardedModelFormatVersion)
    throw UsageError("load_state: checkpoint format " + state.at("format_version") + ", this xlaunch reads " +
                     std::to_string(checkpoint::kFormatVersion) + " to " +
                     std::to_string(checkpoint::kShardedModelFormatVersion) + ". Load it with the xlaunch that saved it");
  check_count(state, "models", run.models.size());
  check_count(state, "optimizers", run.optimizers.size());
  check_count(state, "loaders", run.loaders->size());
  checkpoint::check_loader_positions(*run.loaders, run.world, state);
  std::vector<std::unique_ptr<SavedModel>> saved_models;
  for (size_t i = 0; i < run.models.size(); ++i) {
    saved_models.push_back(std::make_unique<SavedModel>(files, i, disk));
    check_same_model(i, model_state(*run.models[i].module), saved_models.back()->described());
  }
  // First among the checks whose outcome may differ by rank (each fills its own part).
  const auto values = model_values(run, saved_models, checkpoint);
  saved_models.clear();
  // Each rank re-slices its own pieces; collective, as model_values.
  auto saved_optimizers = optimizer_archives(run, files, state, checkpoint);
  check_registered(run, files);
  std::vector<std::unique_ptr<torch::serialize::InputArchive>> saved_schedulers, saved_custom;
  for (size_t i = 0; i < run.schedulers.size(); ++i)
    saved_schedulers.push_back(archive_of(files, "rank0/scheduler_" + std::to_string(i) + ".pt", run.device));
  for (size_t i = 0; i < run.custom.size(); ++i)
    saved_custom.push_back(archive_of(files, "rank0/custom_" + std::to_string(i) + ".pt", run.device));
  const int64_t saved_world = get_int(state, "world_size");
  const std::vector<Named> hook_states = hook_states_to_restore(run, files, saved_world);
  const std::string rng_path = "rng/rank_" + std::to_string(run.rank) + ".pt";
  const bool have_rng = files.count(rng_path) > 0;
  const Named rng = have_rng ? unpickle(files, rng_path) : Named{};

  {
    at::NoGradGuard no_grad;
    for (const auto& [t, v] : values) t.detach().copy_(v.reshape(t.sizes()));
  }
  for (size_t i = 0; i < run.optimizers.size(); ++i) {
    try {
      run.optimizers[i].inner->load(*saved_optimizers[i]);
      // The float32 master weights of 16-bit parameters, which LibTorch's load drops.
      optim::restore_masters(*run.optimizers[i].inner, *saved_optimizers[i]);
    } catch (const c10::Error& e) {
      throw UsageError("load_state: optimizer " + std::to_string(i) + " does not match the checkpoint's (build the "
                       "same optimizer type over the same parameters): " + e.what_without_backtrace());
    }
  }
  for (size_t i = 0; i < run.optimizers.size(); ++i) {
    const std::string key = "optimizer." + std::to_string(i) + ".steps";
    *run.optimizers[i].steps = state.count(key) ? get_int(state, key) : 0;
  }
  // After the optimizers: a scheduler's load sets their learning rates.
  for (size_t i = 0; i < run.schedulers.size(); ++i) {
    const TrainingRun::SchedulerPart& s = run.schedulers[i];
    s.inner->load(*saved_schedulers[i]);
    *s.followed = get_int(state, "scheduler." + std::to_string(i) + ".followed");
  }
  for (size_t i = 0; i < run.custom.size(); ++i) {
    try {
      run.custom[i]->load(*saved_custom[i]);
    } catch (const c10::Error& e) {
      throw UsageError("load_state: registered object " + std::to_string(i) + " (" + run.custom[i]->type_name() +
                       ") could not load its saved state: " + e.what_without_backtrace());
    }
  }
  for (size_t i = 0; i < run.models.size(); ++i)
    if (!hook_states[i].empty()) run.models[i].reducer->load_hook_state(hook_states[i]);
  *run.step = get_int(state, "step");
  watch::set_step(*run.step);
  *run.micro_step = get_int(state, "micro_step");
  if (state.count("accumulation.items_reference"))  // older checkpoints lack it: the first window divides by 1
    run.items->set_reference(std::stod(state.at("accumulation.items_reference")));
  restore_scaler(run, state);
  checkpoint::restore_loader_positions(*run.loaders, run.world, saved_world, state,
                                       [&](const std::string& line) { log_main(run.rank, line); });
  if (have_rng) restore_rng(rng, run.device);
  if (saved_world != run.world)
    log_main(run.rank, "load_state: the checkpoint was saved by " + std::to_string(saved_world) + " processes, this job has " +
                    std::to_string(run.world) + ". Restored: models, optimizers, GradScaler, step counters" +
                    (run.world > saved_world ? "; ranks " + std::to_string(saved_world) + ".." + std::to_string(run.world - 1) +
                                                " keep their own RNG state (none was saved for them)"
                                          : "") +
                    ". The resume is not bitwise exact (another world size reduces in another order)");
}

// Adds to `files` the ranks' own files this rank needs (rank_files_needed), read by each rank
// itself where every rank sees the directory `dir`, else sent by rank 0 one at a time, each rank
// keeping those it needs. Where every rank sees it, the model shards saved with block CRC32s are
// left out, to be read in place by range (restore), and `disk` is set. Collective; a failure
// anywhere throws UsageError everywhere.
void fetch_rank_files(const TrainingRun& run, const std::string& dir, const std::string& manifest_text, Files& files,
                      std::optional<CheckpointOnDisk>& disk) {
  std::map<std::string, ManifestEntry> manifest;
  std::set<std::string> needed;
  std::string error;
  try {
    manifest = parse_manifest(manifest_text, dir + "/MANIFEST");
    // A checkpoint without it is refused by restore(), naming the file.
    const auto state = files.find("rank0/trainer_state.txt");
    const int64_t saved_world =
        state == files.end() ? run.world : get_int(parse_key_values(state->second), "world_size");
    needed = rank_files_needed(run, files, saved_world);
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (const Agreement a = agree_on_error(*run.comm, error); a.failed()) throw UsageError(a.message);
  bool sees = run.rank == 0;
  if (run.rank != 0 && !shared_dir_refused(run.rank)) {
    std::ifstream in(dir + "/MANIFEST", std::ios::binary);
    std::ostringstream os;
    if (in) os << in.rdbuf();
    sees = in && os.str() == manifest_text;
  }
  // Not an error: some rank not seeing it only chooses the way the files go.
  if (!agree_on_error(*run.comm, sees ? "" : "does not see " + dir).failed()) {
    try {
      for (const std::string& path : needed) {
        if (reads_by_range(path) && files.count(block_crc_path(path))) continue;  // in place, by range
        if (const auto it = manifest.find(path); it != manifest.end()) files[path] = read_part(dir, path, it->second);
      }
      disk = CheckpointOnDisk{dir, manifest};
    } catch (const std::exception& e) {
      error = e.what();
    }
  } else {
    for (const auto& [path, entry] : manifest) {
      if (!is_rank_file(path)) continue;
      std::string bytes;
      if (run.rank == 0 && error.empty()) {
        try {
          bytes = read_part(dir, path, entry);
        } catch (const std::exception& e) {
          error = e.what();
        }
      }
      bytes = broadcast_string(*run.comm, bytes);
      if (needed.count(path)) files[path] = std::move(bytes);
    }
  }
  if (const Agreement a = agree_on_error(*run.comm, error); a.failed()) throw UsageError(a.message);
}

}  // namespace

std::string load_run(const std::string& dir, const std::string& project_dir, TrainingRun& run) {
  Files files;
  std::string error;
  ReadInfo read;
  bool fell_back = false;
  std::string chosen = dir;
  // Rank 0 reads what every rank shares; each rank's own files come after (fetch_rank_files).
  const FileFilter shared = [](const std::string& path) { return !is_rank_file(path); };
  if (run.rank == 0) {
    try {
      if (dir == "latest") {
        files = checkpoint::read_latest(
            project_dir, &chosen,
            [](const std::string& path, const std::string& why) {
              std::cerr << "[xlaunch] warning: load_state(\"latest\"): skipping " << path << ", which is torn: " << why
                        << std::endl;
            },
            shared, &read);
      } else {
        files = checkpoint::read_verified(dir, &fell_back, shared, &read);
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  const Agreement outcome = agree_on_error(*run.comm, error);
  if (outcome.failed()) throw UsageError(outcome.message);
  if (dir == "latest") log_main(run.rank, "load_state: loading " + chosen + ", the newest complete checkpoint");
  if (fell_back)
    log_main(run.rank, "load_state: " + dir + " is missing; loading " + dir + ".old, the previous checkpoint that an "
                    "interrupted save_state left in place");
  files = broadcast_files(*run.comm, files);
  const std::string where = broadcast_string(*run.comm, read.dir);
  std::optional<CheckpointOnDisk> disk;
  fetch_rank_files(run, where, broadcast_string(*run.comm, read.manifest), files, disk);
  restore(run, files, where, disk ? &*disk : nullptr);
  if (const std::string changed = changed_settings(files); !changed.empty())
    log_main(run.rank, "load_state: this run's settings differ from those the checkpoint was saved with: " + changed);
  return dir == "latest" ? chosen : dir;
}

}  // namespace xlaunch::checkpoint
