// A prepared optimizer's step (xlaunch/prepared.h): only on sync steps, through the gradient
// scaler under fp16, at ZeRO stage >= 1 over this rank's shard and then gathered; and what one
// optimizer step tells the rest of the facade (the step count, the watchdog, the trackers, the
// report's step).
#include <ATen/Parallel.h>

#include "accelerator/impl.h"
#include "ddp/optim_state.h"
#include "ddp/zero_optimizer.h"
#include "optim/fused_kernels.h"
#include "optim/fused_step.h"
#include "profile/step_clock.h"
#include "state/log_main.h"
#include "watch/watchdog.h"
#include "xlaunch/zero_stages.h"

namespace xlaunch {

void PreparedOptimizer::step() {
  skipped_ = false;
  if (!acc_->sync_gradients()) return;
  {
    const profile::PhaseScope phase(profile::kOptimizer);
    if (sharded_) sharded_->bind_grads();
    acc_->optimizer_step(*this, skipped_);
  }
  if (sharded_ && !skipped_) {
    // Every rank skips alike (the scaler's verdict is agreed), so a skipped step gathers nothing.
    const profile::PhaseScope phase(profile::kCommWait);
    sharded_->gather();
  }
  if (!skipped_) {
    ++steps_;
    watch::set_step(++acc_->step_);
    if (acc_->load_seconds_ >= 0) acc_->announce_first_step_after_load();
    if (acc_->optimizers_.back().get() == this) acc_->track_optimizer_step();  // after every optimizer stepped
  }
  acc_->boundary_pending_ = true;
  // The report's ZeRO figures (RankStats::zero): the state once (state_bytes() walks all of it)...
  if (sharded_ && !skipped_ && !state_reported_ && profile::enabled()) {
    profile::zero_state(static_cast<uint64_t>(state_bytes()));
    state_reported_ = true;
  }
  // With several optimizers, the first one prepared ends the report's step.
  if (!acc_->optimizers_.empty() && acc_->optimizers_.front().get() == this) {
    if (sharded_) {  // ... and the bytes of every model's buckets, and what every optimizer gathers, once per step
      uint64_t scattered = 0, gathered = 0;
      for (const auto& m : acc_->models_) {
        scattered += static_cast<uint64_t>(m.reducer->reduce_scattered_bytes());
        // Stage 3: what the units gathered for this step's forwards and backwards.
        if (m.units) gathered += m.units->take_gathered_bytes();
      }
      for (const auto& o : acc_->optimizers_)
        if (o->sharded_) gathered += static_cast<uint64_t>(o->sharded_->gathered_bytes());
      profile::zero_step(acc_->options_.ddp.zero_stage, scattered, skipped_ ? 0 : gathered);
    }
    profile::step_done(acc_->step_);
  }
}

void PreparedOptimizer::zero_grad(bool set_to_none) {
  if (!acc_->sync_gradients()) return;
  if (!sharded_) {
    inner_->zero_grad(set_to_none);
    return;
  }
  // The model's gradients, not the pieces': theirs are views of the reduced gradients, which the
  // next synced backward overwrites. At stage 1 the gradients are views of their buckets, where the
  // optimizer reads them: zeroed there, they stay (autograd accumulates into them), which saves
  // freeing and faulting in a fresh gradient and copying it into its bucket every step, as
  // PyTorch's DDP with gradient_as_bucket_view. (At stage 2 they are released already.)
  at::NoGradGuard no_grad;
  const bool keep = !shards_gradients(acc_->options_.ddp.zero_stage);
  for (const auto& group : sharded_->original_params())
    for (const at::Tensor& p : group) {
      at::Tensor& grad = const_cast<at::Tensor&>(p).mutable_grad();
      if (!grad.defined()) continue;
      if (set_to_none && !keep) grad = at::Tensor();
      else grad.zero_();
    }
}

int64_t PreparedOptimizer::state_bytes() const { return xlaunch::state_bytes(*inner_); }

namespace detail {

void AcceleratorImpl::optimizer_step(PreparedOptimizer& opt, bool& skipped) {
  skipped = false;
  if (!scaler_) {
    step_inner(opt);
    return;
  }
  // Every rank sees the same averaged gradients and reduces found_inf, so every rank skips the
  // same steps and keeps the same scale.
  skipped = !scaler_->step(*opt.inner_, [&] { step_inner(opt); });
  scaler_->update();
}

void AcceleratorImpl::step_inner(PreparedOptimizer& opt) {
  torch::optim::Optimizer& inner = *opt.inner_;
  const optim::FusedMode mode = optim::parse_fused_mode(options_.optimizer_fused);
  if (mode == optim::FusedMode::Off) {
    inner.step();
    return;
  }
  // Checked at every step: a loaded state or a new parameter group may change the answer.
  const std::string why = optim::why_not_fused(inner);
  // Only when a line is said (once per change), not every step.
  const auto which = [&] { return "optimizer " + std::to_string(opt.index_) + " (" + optim::optimizer_kind(inner) + ")"; };
  if (why.empty()) {
    if (opt.fused_said_ != 1) {
      const std::string masters = optim::master_weights_summary(inner, opt.sharded_ != nullptr);
      log_main(rank_, which() + ": the fused step (optimizer.fused " + options_.optimizer_fused + "; " +
                          optim::kernels::vector_isa() + " loops, intra-op threads: " +
                          std::to_string(at::get_num_threads()) + (masters.empty() ? "" : "; " + masters) + ")");
    }
    opt.fused_said_ = 1;
    optim::fused_step(inner, /*checked=*/true);
    return;
  }
  if (mode == optim::FusedMode::On) throw UsageError(optim::fused_refusal(opt.index_, inner, why));
  if (opt.fused_said_ != 2) log_main(rank_, which() + ": LibTorch's step, not the fused one, because " + why);
  opt.fused_said_ = 2;
  inner.step();
}

}  // namespace detail

bool Accelerator::optimizer_step_was_skipped() const {
  for (const auto& o : impl_->optimizers_)
    if (o->step_was_skipped()) return true;
  return false;
}

}  // namespace xlaunch
