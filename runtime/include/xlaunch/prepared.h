// What Accelerator::prepare hands back (xlaunch/accelerator.h, which includes this): a prepared
// model, optimizer and learning-rate scheduler. Each is a thin handle on the Accelerator that
// made it, which keeps the optimizers and schedulers and must outlive every handle.
#pragma once

#include <torch/optim/optimizer.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <utility>
#include <vector>

#include "xlaunch/lr_scheduler.h"

namespace xlaunch {

class Accelerator;
class ShardedOptimizer;  // ZeRO stages 1 and 2 (runtime/src/ddp/zero_optimizer.h)

namespace detail {
class AcceleratorImpl;  // the Accelerator's state (runtime/src/accelerator/impl.h)

// When `e` is PyTorch's refusal of an operation without a deterministic implementation (deterministic:
// true), throws UsageError naming the operation, `where`, and the fix; returns otherwise
// (runtime/src/algorithms/algorithms.h).
void explain_refusal(const std::exception_ptr& e, const char* where);
}  // namespace detail

// While alive: rank 0's buffers have been broadcast (training mode, more than one rank) and
// autocast is on when mixed precision is. Made by PreparedModel::operator().
class ForwardScope {
 public:
  ForwardScope(Accelerator& acc, size_t model_id);
  ~ForwardScope();
  ForwardScope(const ForwardScope&) = delete;
  ForwardScope& operator=(const ForwardScope&) = delete;

 private:
  std::shared_ptr<void> phase_;     // the step clock's "forward" phase (docs/performance.md)
  std::shared_ptr<void> autocast_;  // the autocast guard, when mixed precision is on
};

// A prepared model: call it like the module (model(x) runs forward), or reach the module with ->.
template <typename M>
class PreparedModel {
 public:
  PreparedModel(Accelerator* acc, M module, size_t id) : acc_(acc), module_(std::move(module)), id_(id) {}

  template <typename... Args>
  auto operator()(Args&&... args) {
    ForwardScope scope(*acc_, id_);
    try {
      return module_->forward(std::forward<Args>(args)...);
    } catch (...) {
      detail::explain_refusal(std::current_exception(), "the forward of a prepared model");
      throw;
    }
  }
  auto operator->() { return &*module_; }
  auto operator->() const { return &*module_; }
  const M& module() const { return module_; }

 private:
  Accelerator* acc_;
  M module_;
  size_t id_;
};

// A prepared optimizer: steps and zeroes only on sync steps (gradient accumulation), and steps
// through the gradient scaler under fp16 (a step with non-finite gradients is skipped).
// With ddp.zero_stage 1 or 2 (docs/memory.md) the optimizer is rebound at prepare to this rank's
// shard of the prepared models' parameters: inner().param_groups() then hold flat pieces of them,
// and step() allgathers the updated shards after the inner step.
class PreparedOptimizer {
 public:
  PreparedOptimizer(detail::AcceleratorImpl* acc, torch::optim::Optimizer* inner,
                    std::shared_ptr<ShardedOptimizer> sharded = {}, size_t index = 0)
      : acc_(acc), inner_(inner), sharded_(std::move(sharded)), index_(index) {}
  void step();
  // Default set_to_none=true, like LibTorch; the reducer moves the next gradients into its buckets.
  void zero_grad(bool set_to_none = true);
  bool step_was_skipped() const { return skipped_; }
  // Steps that really happened: not accumulation micro-steps, not steps the GradScaler skipped.
  int64_t steps_taken() const { return steps_; }
  torch::optim::Optimizer& inner() { return *inner_; }
  // The bytes of this rank's optimizer state (every tensor of it): 1/W of stage 0's at zero_stage >= 1.
  int64_t state_bytes() const;
  // Null at zero_stage 0.
  ShardedOptimizer* sharded() const { return sharded_.get(); }

 private:
  friend class detail::AcceleratorImpl;  // checkpoints save and restore steps_
  detail::AcceleratorImpl* acc_;
  torch::optim::Optimizer* inner_;
  std::shared_ptr<ShardedOptimizer> sharded_;
  bool skipped_ = false;
  int64_t steps_ = 0;
  bool state_reported_ = false;  // ZeRO: state_bytes() went to the report (after the first step)
  size_t index_;                 // in prepare order, for messages
  int fused_said_ = 0;           // the step last announced: 1 fused, 2 LibTorch's (optimizer.fused)
};

// A prepared learning-rate scheduler (lr_scheduler.h): advances exactly once per optimizer step
// that really happened, whatever the number of ranks. Call step() after opt.step() on every
// micro-step, as with Accelerate: on accumulation micro-steps and steps the GradScaler skipped it
// does nothing; it never advances more than its optimizer stepped. So count a schedule's
// warmup and total steps in optimizer steps (batches / the accumulation steps). A
// metric-driven one (ReduceLROnPlateau) advances on step(metric), with the metric averaged over
// the ranks first (one allreduce per call) so every rank sets the same learning rate.
class PreparedScheduler {
 public:
  PreparedScheduler(detail::AcceleratorImpl* acc, Scheduler* inner, std::unique_ptr<Scheduler> owned,
                    const PreparedOptimizer* opt);
  void step();
  void step(double metric);
  std::vector<double> last_lr() const { return inner_->last_lr(); }
  Scheduler& inner() { return *inner_; }

 private:
  friend class detail::AcceleratorImpl;  // join and save_state catch up; checkpoints restore followed_
  // Advances once per optimizer step it has not followed yet (before a checkpoint too, so that a
  // save inside the loop holds the schedule of the step it saves).
  void catch_up();
  detail::AcceleratorImpl* acc_;
  Scheduler* inner_;
  std::unique_ptr<Scheduler> owned_;  // the adapter of a LibTorch scheduler
  const PreparedOptimizer* opt_;
  int64_t followed_ = 0;  // opt_'s steps_taken() the schedule has advanced through
};

}  // namespace xlaunch
