// Accelerator::backward and what surrounds it: the accumulation window (accumulate, no_sync, the
// loss's normalisation: ddp/accumulation.h), the reducers' part of backward, and clip_grad_norm_
// over the reduced gradients (at ZeRO stage >= 1 over every rank's shard).
#include <ATen/ops/linalg_vector_norm.h>
#include <ATen/ops/maximum.h>
#include <ATen/ops/zeros.h>
#include <torch/nn/utils/clip_grad.h>

#include <cmath>

#include "accelerator/impl.h"
#include "algorithms/algorithms.h"
#include "profile/step_clock.h"
#include "profile/sync_count.h"
#include "watch/preemption.h"
#include "watch/watchdog.h"
#include "xlaunch/error.h"
#include "xlaunch/zero_stages.h"

namespace xlaunch {

void Accelerator::backward(const at::Tensor& loss) { impl_->run_backward(loss, false); }

void Accelerator::backward(const at::Tensor& loss_sum, double num_items) {
  impl_->refuse_items_with_uneven_inputs();
  impl_->items_->add_items(num_items);
  impl_->run_backward(loss_sum, true);
}

void Accelerator::backward(const at::Tensor& loss_sum, const at::Tensor& num_items) {
  impl_->refuse_items_with_uneven_inputs();
  impl_->items_->add_items(num_items);
  impl_->run_backward(loss_sum, true);
}

void Accelerator::accumulate() {
  detail::AcceleratorImpl& a = *impl_;
  const int64_t left = a.options_.sync_with_dataloader && !a.loaders_.empty() ? a.loaders_.front()->batches_left() : -1;
  const MicroStep s = plan_micro_step(a.micro_step_, a.accumulation_steps_, left);
  a.sync_gradients_ = s.sync;
  a.window_length_ = s.window_length;
  a.micro_step_ = s.next_done;
}

Accelerator::NoSyncGuard::NoSyncGuard(Accelerator& acc) : acc_(acc), saved_(acc.impl_->no_sync_) {
  acc_.impl_->no_sync_ = true;
}
Accelerator::NoSyncGuard::~NoSyncGuard() { acc_.impl_->no_sync_ = saved_; }

double Accelerator::clip_grad_norm_(double max_norm, double norm_type) { return impl_->clip_grad_norm_(max_norm, norm_type); }

namespace detail {

void AcceleratorImpl::refuse_items_with_uneven_inputs() const {
  // A joined rank's shadow steps (accelerator/join.cpp) do not take part in the window's count of items
  // (one allreduce at the sync step): the ranks still training would wait for it. Every rank is
  // uneven or none, and every rank calls this form: all refuse at the first call, before any
  // collective.
  if (uneven_ && world_ > 1)
    throw UsageError("acc.backward(loss_sum, num_items) is not supported with uneven inputs (even_batches false, "
                     "already_sharded, or acc.expect_uneven_inputs): a rank whose data ended cannot take part in "
                     "the count of items. Use acc.backward(loss) with a loss normalised per nominal batch "
                     "(docs/data-loading.md#uneven-inputs), or keep even_batches true");
}

void AcceleratorImpl::run_backward(const at::Tensor& loss, bool by_items) {
  if (loaders_.empty()) at_step_boundary();  // a loop without a prepared loader: the boundary is here
  const profile::PhaseScope phase(profile::kBackward);
  watch::mark_alive(status::Phase::Backward);
  // A preemption asked of this rank travels on the next gradient allreduce (preemption.h).
  if (preempt::requested())
    for (auto& m : models_) m.reducer->set_control_bit(true);
  const bool sync = sync_gradients();
  at::Tensor scaled = loss;
  double factor = 1;  // what the reduced gradients are multiplied by (ddp/accumulation.h, step 3)
  if (by_items) {
    if (items_->divisor() != 1) scaled = scaled / items_->divisor();
    if (sync) factor = items_->close(*cpu_comm_);  // before backward: a window of no items fails here
  } else {
    items_->add_mean(sync);
    if (window_length_ > 1) scaled = scaled / window_length_;
  }
  if (scaler_) scaled = scaler_->scale(scaled);
  for (auto& m : models_) m.reducer->prepare_for_backward(sync);
  try {
    scaled.backward();
  } catch (...) {
    // Leave the reducers usable; the collectives already started complete in finalize.
    for (auto& m : models_) {
      try { m.reducer->finalize_backward(); } catch (...) {}
    }
    algorithms::explain_refusal(std::current_exception(), "acc.backward");
    throw;
  }
  for (auto& m : models_) m.reducer->finalize_backward();
  if (factor != 1) {
    std::vector<at::Tensor> grads;
    for (auto& m : models_)
      for (at::Tensor& g : m.reducer->reduced_grads()) grads.push_back(std::move(g));
    scale_gradients(grads, factor);
  }
  pending_accumulation_ = !sync;
  if (sync) step_clip_.clear();
}

double AcceleratorImpl::clip_grad_norm_(double max_norm, double norm_type) {
  if (scaler_ && sync_gradients())
    for (auto& o : optimizers_)
      if (!scaler_->is_unscaled(o->inner())) scaler_->unscale_(o->inner());
  if (sync_gradients()) step_clip_ = {max_norm, norm_type};  // what a joined rank repeats (join)
  // The norm is returned as a number: read on the host, as LibTorch's clip_grad_norm_ reads it.
  profile::syncs::RuntimeSync sync("clip_grad_norm_'s norm, returned as a number");
  // On accumulation micro-steps the gradients are local and whole at every stage: clipped as at stage 0.
  if (shards_optimizer_state(options_.ddp.zero_stage) && !models_.empty() && sync_gradients()) return clip_sharded(max_norm, norm_type);
  std::vector<at::Tensor> params;
  for (auto& m : models_)
    for (const auto& p : m.module->parameters())
      if (p.requires_grad()) params.push_back(p);
  return torch::nn::utils::clip_grad_norm_(params, max_norm, norm_type);
}

double AcceleratorImpl::clip_sharded(double max_norm, double norm_type) {
  // Every rank's shard of every bucket: the norm of all of them, agreed in one allreduce, then each
  // rank scales its own shard (the optimizer reads nothing else). As LibTorch's clip_grad_norm_.
  std::vector<at::Tensor> shards;
  for (auto& m : models_)
    for (at::Tensor& t : m.reducer->grad_shards()) shards.push_back(t);
  const bool inf = std::isinf(norm_type);
  at::Tensor local = at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(device_));
  for (const at::Tensor& t : shards) {
    const at::Tensor n = at::linalg_vector_norm(t, norm_type).to(at::kDouble);
    if (inf) local = at::maximum(local, n);
    else local.add_(n.pow(norm_type));
  }
  // Over the ranks the shards are cut over: with ddp.shard_group machine the other machines hold the same shards.
  std::shared_ptr<Communicator> group;  // (none for a model without trainable parameters)
  for (auto& m : models_)
    if (!group) group = m.reducer->shard_communicator();
  if (group && group->size() > 1) group->allreduce(local, inf ? ReduceOp::Max : ReduceOp::Sum);
  const double total = inf ? local.item<double>() : std::pow(local.item<double>(), 1.0 / norm_type);
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1) {
    at::NoGradGuard no_grad;
    for (at::Tensor& t : shards) t.mul_(coef);
  }
  return total;
}

}  // namespace detail
}  // namespace xlaunch
