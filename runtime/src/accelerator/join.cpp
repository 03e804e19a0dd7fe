// Uneven inputs: Accelerator::join (xlaunch/accelerator.h), the semantics of PyTorch's Join.
//
// Why it needs no collective of its own: every synced backward already reduces the last gradient
// bucket, whose tail says which ranks contributed to it (ddp/contributors.h). A joined rank runs
// shadow steps that issue exactly the collectives an active rank's step issues, in the same order:
//  1. the step boundary (a preemption or a named checkpoint agreed there is every rank's), before
//     the forward with a prepared loader, after it without one (backward has it there);
//  2. each prepared model's buffer broadcast (what its forward issues), from the lowest rank that
//     contributed last (the newest buffers; the same choice everywhere), and at stage 3 the gathers
//     its forward issues (Reducer::replay_forward_script: this rank's last step's, in its order);
//  3. each model's gradient buckets, with zeros and contributor 0 (Reducer::join_backward, at stage
//     3 with the backward's gathers between them as this rank's last step had them); the average
//     then divides by the ranks that contributed;
//  4. if anyone contributed: the optimizer step, the same as the others' on the same averaged
//     gradients (clip_grad_norm_ as this rank's last step had it, the fp16 scaler's agreement, every
//     prepared optimizer and scheduler), so every replica makes the same update.
// A step with no contributor means every rank is in here: all leave after that same step.
#include "accelerator/impl.h"
#include "xlaunch/zero_stages.h"
#include "watch/preemption.h"
#include "watch/watchdog.h"
#include "xlaunch/env_vars.h"
#include "xlaunch/error.h"

namespace xlaunch {

void Accelerator::expect_uneven_inputs() { impl_->expect_uneven_inputs(); }

void Accelerator::join() {
  if (!impl_->loader_joins_) impl_->join_now();  // else the loader has joined at its epoch's end already
}

namespace detail {

void AcceleratorImpl::expect_uneven_inputs() {
  uneven_ = true;
  for (auto& m : models_) m.reducer->set_uneven(true);
  check_uneven_supported();
}

void AcceleratorImpl::check_uneven_supported() {
  if (!uneven_ || world_ == 1) return;
  const std::string key = env::key_of(env::kGradAccumSteps);
  // A rank whose data ended repeats its own last step's gathers (join.cpp): the others' steps must
  // gather the same units in the same order, one synced backward each.
  const std::string stage3 = "uneven inputs (even_batches false, already_sharded, or acc.expect_uneven_inputs) with "
                             "ddp.zero_stage 3: a rank whose data ended repeats the parameter gathers of its own "
                             "last step while the others train, ";
  if (shards_parameters(options_.ddp.zero_stage) && accumulation_steps_ > 1)
    throw UsageError(stage3 + "one synced backward per step, and " + key + " is " +
                     std::to_string(accumulation_steps_) + " (the micro-steps between gather too). Set " + key +
                     " 1, keep even_batches true, or use zero_stage 2");
  if (shards_parameters(options_.ddp.zero_stage) && options_.ddp.find_unused_parameters)
    throw UsageError(stage3 + "so every step must call the same units, and ddp.find_unused_parameters says some "
                     "steps leave some out. Set find_unused_parameters false, keep even_batches true, or use "
                     "zero_stage 2");
  if (accumulation_steps_ == 1) return;
  // With sync_with_dataloader every rank closes its window at its own last batch: ranks with
  // different batch counts would sync at different micro-steps, and their buckets not match.
  if (options_.sync_with_dataloader)
    throw UsageError("uneven inputs (even_batches false, already_sharded, or acc.expect_uneven_inputs) with " +
                     key + " " + std::to_string(accumulation_steps_) +
                     " and sync_with_dataloader: each rank would end its last accumulation window at its own last "
                     "batch, where the others do not sync. Set AcceleratorOptions::sync_with_dataloader false, or " +
                     key + " 1, or keep even_batches true");
  if (!options_.broadcast_buffers) return;
  for (const auto& m : models_) {
    if (m.module->buffers().empty()) continue;
    // A joined rank cannot know how many forwards (buffer broadcasts) the others' accumulation
    // cycle still holds.
    throw UsageError("uneven inputs (even_batches false, already_sharded, or acc.expect_uneven_inputs) with " +
                     key + " " + std::to_string(accumulation_steps_) +
                     " and a model with buffers broadcast before each forward: a rank whose data ended cannot "
                     "follow the others' forwards. Set ddp.broadcast_buffers false, or " +
                     key + " 1, or keep even_batches true");
  }
}

void AcceleratorImpl::join_now() {
  micro_step_ = 0;  // every rank starts the next epoch's accumulation cycle afresh
  if (world_ == 1 || models_.empty()) {
    pending_accumulation_ = false;
    return;
  }
  if (!uneven_ && !device_.is_cpu())
    throw UsageError("acc.join() on " + device_.str() + " needs acc.expect_uneven_inputs() on every rank before "
                     "training (the ranks still training must read who contributed); or prepare a loader with "
                     "even_batches false, which does it");
  if (shards_parameters(options_.ddp.zero_stage))
    for (const auto& m : models_)
      if (!m.reducer->has_step_script())
        throw UsageError("rank " + std::to_string(rank_) + " joined (acc.join, or its data ended) before its first "
                         "step at ddp.zero_stage 3, and a joined rank repeats the parameter gathers of its own last "
                         "step: give every rank at least one batch (fewer ranks, or a larger dataset)");
  watch::set_joined(true);
  bool contribute = pending_accumulation_;
  sync_gradients_ = true;
  for (;;) {
    // Where the others meet their step boundary: at the loader's next batch, before the forward;
    // without a prepared loader, in backward, after it.
    if (!loaders_.empty()) at_step_boundary();
    for (size_t id = 0; id < models_.size(); ++id) {
      broadcast_buffers(id);
      models_[id].reducer->replay_forward_script();
    }
    if (loaders_.empty()) at_step_boundary();
    if (preempt::requested())  // as backward does: the bit travels on the gradient allreduce
      for (auto& m : models_) m.reducer->set_control_bit(true);
    for (auto& m : models_) m.reducer->join_backward(contribute);
    contribute = false;
    if (models_.front().reducer->contributors() == 0) break;
    if (!step_clip_.empty()) clip_grad_norm_(step_clip_[0], step_clip_[1]);
    for (auto& o : optimizers_) o->step();
    for (auto& s : schedulers_) s->catch_up();
  }
  pending_accumulation_ = false;
  // Every rank holds the buffers of the rank that trained last, and the next epoch starts from rank 0.
  for (size_t id = 0; id < models_.size(); ++id) broadcast_buffers(id);
  for (auto& m : models_) m.reducer->reset_contributors();
  watch::set_joined(false);
}

}  // namespace detail
}  // namespace xlaunch
