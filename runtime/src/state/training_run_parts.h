// What save_run and load_run (state/training_run.h) share, in state/training_run_parts.cpp.
#pragma once

#include <c10/core/Device.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <cstdint>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "state/checkpoint_dir.h"
#include "state/trainer_state.h"
#include "state/training_run.h"
#include "state/zero_state.h"

namespace xlaunch::checkpoint {

// The bytes of an archive that `fill` writes into.
template <typename Fn>
std::string archive_bytes(Fn&& fill) {
  torch::serialize::OutputArchive archive;
  fill(archive);
  // Straight into the string (a stringstream would copy the bytes once more as it grows, and again
  // for its str()): an asynchronous save holds training for this.
  std::string out;
  archive.save_to([&out](const void* data, size_t n) {
    out.append(static_cast<const char*>(data), n);
    return n;
  });
  return out;
}

// The archive saved at `path` of `files`, its tensors on `device`; throws UsageError when it is absent.
std::unique_ptr<torch::serialize::InputArchive> archive_of(const Files& files, const std::string& path,
                                                           const at::Device& device);

Reducers reducers_of(const TrainingRun& run);
// The ranks ZeRO's shards are cut over (Reducer::shard_world): the job, or with ddp.shard_group
// machine one machine's ranks.
int shard_world_of(const TrainingRun& run);

// "scheduler <i> <name>" and "custom <i> <type>" lines: what was prepared and registered.
std::string registered_text(const TrainingRun& run);
// Refuses a checkpoint whose schedulers or registered objects differ in number or kind.
void check_registered(const TrainingRun& run, const Files& files);

// The archive each optimizer loads: the saved one, or at another world size or stage (either
// side sharded) this rank's state re-sliced from the saved pieces. Collective: a refusal on any
// rank is every rank's. `checkpoint` names it in messages.
std::vector<std::unique_ptr<torch::serialize::InputArchive>> optimizer_archives(const TrainingRun& run,
                                                                                const Files& files,
                                                                                const KeyValues& state,
                                                                                const std::string& checkpoint);

// The ranks' own files (checkpoint_dir.h is_rank_file) this rank reads to resume from a checkpoint
// whose other files are `files`: its generators, the communication-hook states it takes, and of
// each sharded optimizer and model the saved ranks' files that overlap what it holds now.
// Throws UsageError for a damaged layout.
std::set<std::string> rank_files_needed(const TrainingRun& run, const Files& files, int64_t saved_world);

// The saved communication-hook state of model i that this rank takes: its own when the world size
// is the saved one, else rank 0's, of which the hook keeps what all ranks share.
std::string hook_state_file(const TrainingRun& run, size_t model, int64_t saved_world);

// The saved hook state each model takes on this rank; throws UsageError when one does not fit.
std::vector<NamedTensors> hook_states_to_restore(const TrainingRun& run, const Files& files, int64_t saved_world);

}  // namespace xlaunch::checkpoint
