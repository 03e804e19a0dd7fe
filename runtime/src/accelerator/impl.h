// The Accelerator's state and the steps its calls share (the pimpl of xlaunch/accelerator.h).
//
// runtime/src/accelerator/ is the facade's room, and this header is the only thing in the runtime
// that sees both the Accelerator and the subsystems it drives: the reducers (ddp/), checkpoints
// (state/, through checkpoint::TrainingRun), trackers (track/, through TrackingState), the
// watchdog (watch/) and the step clock (profile/). None of those includes xlaunch/accelerator.h.
// One file here per concept: construction (construct.cpp), prepare (prepare.cpp, schedulers.cpp),
// backward and the optimizer step (backward.cpp, optimizer.cpp), the step boundary
// (step_boundary.cpp), checkpoints (checkpoint.cpp), tracking (tracking.cpp), uneven inputs
// (join.cpp), collectives on user data (collectives.cpp), and the public calls that only read the
// state (facade.cpp).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ddp/accumulation.h"
#include "ddp/units.h"
#include "state/training_run.h"
#include "track/tracking_state.h"
#include "xlaunch/accelerator.h"

namespace xlaunch::detail {

// Data members are public: this class is the facade's own, used by the files of this folder and
// the prepared handles (xlaunch/prepared.h), never by a subsystem. They keep their declaration
// order from before the pimpl: the trackers end first when an Accelerator is destroyed.
class AcceleratorImpl {
 public:
  AcceleratorImpl(AcceleratorOptions options, std::shared_ptr<Communicator> cpu_comm);  // construct.cpp
  ~AcceleratorImpl();

  // construct.cpp: the communicators (Accelerator::communicator, bucket_communicator).
  std::shared_ptr<Communicator> communicator(const at::Device& device);
  std::shared_ptr<Communicator> bucket_communicator(const at::Device& device);

  // prepare.cpp
  size_t prepare_module(std::shared_ptr<torch::nn::Module> module);
  void check_same_everywhere(const std::string& what, const std::string& mine);
  // Rank 0's buffers of the model (or with uneven inputs the last contributor's), before its forward.
  void broadcast_buffers(size_t model_id);
  Loader& prepare_loader(const Loader& loader);
  // schedulers.cpp
  PreparedScheduler& prepare_scheduler(Scheduler* s, std::unique_ptr<Scheduler> owned, PreparedOptimizer* opt);
  PreparedOptimizer& only_optimizer(const char* what);

  // backward.cpp
  bool sync_gradients() const { return sync_gradients_ && !no_sync_; }
  void refuse_items_with_uneven_inputs() const;
  void run_backward(const at::Tensor& loss, bool by_items);
  double clip_grad_norm_(double max_norm, double norm_type);
  // clip_grad_norm_ at ddp.zero_stage >= 1: over every rank's shard of every bucket.
  double clip_sharded(double max_norm, double norm_type);
  // optimizer.cpp: one prepared optimizer's inner step, through the scaler under fp16, fused where
  // optimizer.fused allows (step_inner).
  void optimizer_step(PreparedOptimizer& opt, bool& skipped);
  void step_inner(PreparedOptimizer& opt);
  // Sum or mean over ranks (Accelerator::reduce; a metric scheduler's step).
  at::Tensor reduce(const at::Tensor& t, ReduceOp op);

  // step_boundary.cpp. The step boundary (docs/checkpointing.md): the first prepared loader's next
  // batch, or the next backward without one, after an optimizer step. Preemption and
  // every_n_steps act here.
  void at_step_boundary();
  void at_epoch_end();
  [[noreturn]] void stop_for_preemption();
  bool preemption_agreed();

  // checkpoint.cpp
  void save_state(const std::string& dir);
  void load_state(const std::string& dir);
  void save_named(const char* why);
  // Waits for a background save (checkpoint.async), then rotates the named checkpoints it was for.
  // collective: the ranks agree on the outcome and throw Error together; else (the destructor)
  // each waits for its own part and an error is printed.
  void wait_for_save(bool collective);
  void rotate_named(const std::string& newest, const char* why, double seconds, const std::string& how);
  void announce_first_step_after_load();
  // What save_state writes and load_state restores: every prepared and registered part.
  checkpoint::TrainingRun training_run();

  // join.cpp
  void expect_uneven_inputs();
  void check_uneven_supported();
  // Refuses an fsdp.param_dtype (the mixed-precision policy) these settings and `params` cannot take,
  // on every rank alike (after the settings agreed).
  void check_param_dtype(const std::vector<at::Tensor>& params) const;
  void join_now();

  // tracking.cpp: the utilization at the step boundary, histograms after an optimizer step, the
  // resumption after load_state, and the logs on disk before a checkpoint.
  void track_step_boundary();
  void track_optimizer_step();
  void track_loaded(const std::string& checkpoint);
  void drain_trackers();

  struct Model {
    std::shared_ptr<torch::nn::Module> module;
    std::unique_ptr<Reducer> reducer;
    std::unique_ptr<Units> units;  // zero_stage 3 only (ddp/units.h)
  };
  // While alive: every unit of every model at zero_stage 3 is whole (a checkpoint, save_model); then
  // freed, the shards first taking what the parameters hold when keep_changes (a load).
  class WholeModels {
   public:
    WholeModels(AcceleratorImpl& a, bool keep_changes);
    ~WholeModels();
    WholeModels(const WholeModels&) = delete;
    WholeModels& operator=(const WholeModels&) = delete;

   private:
    AcceleratorImpl& a_;
    bool keep_changes_;
  };

  AcceleratorOptions options_;
  int rank_ = 0, world_ = 1, local_rank_ = 0, local_world_ = 1;
  at::Device device_{at::kCPU};
  std::shared_ptr<Communicator> cpu_comm_;
  std::shared_ptr<Communicator> cuda_comm_;
  std::shared_ptr<Communicator> cpu_bucket_comm_;  // what reduces CPU gradient buckets
  std::vector<Model> models_;
  std::vector<std::unique_ptr<PreparedOptimizer>> optimizers_;
  std::vector<std::unique_ptr<Loader>> loaders_;
  std::vector<std::unique_ptr<PreparedScheduler>> schedulers_;
  std::vector<std::unique_ptr<CheckpointObject>> custom_;
  bool boundary_pending_ = false;  // an optimizer step came since the last step boundary
  int64_t last_saved_step_ = -1;   // the step of the last named checkpoint this process wrote
  std::unique_ptr<checkpoint::BackgroundSave> background_save_;  // checkpoint.async: being written
  std::string rotate_after_save_;  // the named checkpoint background_save_ writes ("": not a named one)
  double load_seconds_ = -1;       // how long the last load_state took, until the next step says so
  MixedPrecision mixed_precision_ = MixedPrecision::No;
  std::unique_ptr<GradScaler> scaler_;
  int64_t micro_step_ = 0;     // micro-steps of the accumulation window done
  int64_t window_length_ = 1;  // micro-steps of the window in progress (backward(loss) divides by it)
  // Micro-steps per optimizer step, as set (AcceleratorOptions; read once, by the constructor).
  int64_t accumulation_steps_ = 1;
  std::unique_ptr<ItemWindow> items_;  // the window's kind of backward and items
  int64_t step_ = 0;
  bool sync_gradients_ = true;
  bool no_sync_ = false;
  // Uneven inputs (join): the reducers read their contributors; gradients accumulated without
  // sync since the last synced backward; clip_grad_norm_'s arguments in the last synced step.
  bool uneven_ = false;
  bool loader_joins_ = false;  // the first prepared loader joins at each epoch's end
  bool pending_accumulation_ = false;
  std::vector<double> step_clip_;  // {max_norm, norm_type}, or empty
  std::unique_ptr<TrackingState> tracking_;  // set by init_trackers when log_with names a tracker
  std::string loaded_from_;  // the checkpoint the last load_state loaded
};

}  // namespace xlaunch::detail
