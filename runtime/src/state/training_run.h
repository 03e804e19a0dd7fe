// A training run's checkpoint (the format: checkpoint_dir.h, docs/checkpointing.md): what
// Accelerator::save_state writes and load_state puts back, handed over by the Accelerator as a
// TrainingRun, the parts it prepared and registered, in order.
//
// Who does what (docs/checkpointing.md, "Who writes and reads what"): every rank writes its own
// files (generators, hook state, optimizer and stage-3 parameter shards) into the temporary
// directory rank 0 made (checkpoint_dir.h PendingCheckpoint), or, where some rank cannot see it,
// sends them to rank 0 one file at a time; rank 0 writes the shared files and the MANIFEST and
// swaps the directory into place. The ranks agree on the outcome (comm/agree.h), so every rank
// returns only once the checkpoint exists, and a failed write throws the same error on every rank
// instead of hanging. On load, rank 0 reads and verifies the shared files and broadcasts them, so
// every rank validates the same bytes (a refusal happens everywhere); each rank then reads, or is
// sent, only its own files and the saved shards that overlap its part, and re-slices them
// (state/zero_state.h, state/model_shards.h), the ranks agreeing on any refusal.
#pragma once

#include <c10/core/Device.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "xlaunch/reducer.h"

namespace xlaunch {

class CheckpointObject;
class Communicator;
class GradScaler;
class ItemWindow;
class Loader;
class Scheduler;
class ShardedOptimizer;

namespace checkpoint {

// Pointers into the Accelerator's state, valid for the call they are passed to; load_run writes the
// saved values through them (the counters included).
struct TrainingRun {
  struct ModelPart {
    torch::nn::Module* module;
    Reducer* reducer;
  };
  struct OptimizerPart {
    torch::optim::Optimizer* inner;
    const ShardedOptimizer* sharded;  // null at zero_stage 0
    int64_t* steps;                   // the prepared optimizer's steps taken
  };
  struct SchedulerPart {
    Scheduler* inner;
    int64_t* followed;  // its optimizer's steps the schedule has advanced through
  };

  Communicator* comm = nullptr;  // the CPU communicator of every rank
  int rank = 0, world = 1;       // comm's
  at::Device device{at::kCPU};   // where loaded tensors go
  ReducerOptions ddp;            // zero_stage, comm_hook and powersgd_rank, saved and compared
  std::string mixed_precision;   // named when a saved GradScaler state finds no scaler
  std::vector<ModelPart> models;
  std::vector<OptimizerPart> optimizers;
  std::vector<SchedulerPart> schedulers;
  std::vector<CheckpointObject*> custom;  // registered for checkpointing
  std::vector<std::unique_ptr<Loader>>* loaders = nullptr;
  GradScaler* scaler = nullptr;  // under fp16
  ItemWindow* items = nullptr;   // backward(loss_sum, num_items)'s reference divisor
  int64_t* step = nullptr;       // optimizer steps taken
  int64_t* micro_step = nullptr;  // micro-steps of the accumulation window done
};

// Writes `run` to `dir` atomically (a crash leaves the previous checkpoint loadable). Collective;
// throws Error on every rank when rank 0 could not write.
void save_run(const std::string& dir, const TrainingRun& run);

// A save_state whose files are being written in the background (checkpoint.async,
// docs/checkpointing.md "Asynchronous saves").
class BackgroundSave {
 public:
  virtual ~BackgroundSave() = default;  // waits, as wait() does
  // Waits until this rank's part is written (on rank 0: until the checkpoint is complete, or the
  // deadline it was given has passed); "" when it succeeded, else why not. Not collective.
  virtual std::string wait() = 0;
  virtual const std::string& dir() const = 0;
  virtual double blocked_s() const = 0;  // how long save_state held training
  virtual double written_s() const = 0;  // from then until this rank's part was written (after wait)
};

// As save_run, but training is held only for the collective opening and the copy of each rank's
// state to host memory (serialized); a thread on every rank writes it, and rank 0's commits once
// every rank has written its part, waiting at most `deadline_s`. Collective. Returns null when it
// saved synchronously instead: some rank cannot see the directory, so the files travel through
// rank 0 over the communicator, which only the ranks together can do.
std::unique_ptr<BackgroundSave> save_run_async(const std::string& dir, const TrainingRun& run, double deadline_s);

// Restores `run` from `dir`, or with "latest" from the newest complete named checkpoint under
// `project_dir`, validating everything before changing anything (a refused checkpoint leaves the
// run as it was). Collective; a refusal throws UsageError on every rank. Returns the checkpoint
// loaded: `dir`, or the one "latest" chose.
std::string load_run(const std::string& dir, const std::string& project_dir, TrainingRun& run);

}  // namespace checkpoint
}  // namespace xlaunch
