// Prepared learning-rate schedulers (xlaunch/prepared.h's PreparedScheduler: one advance per
// optimizer step that happened, a metric averaged over the ranks) and the user's objects
// registered for checkpointing.
#include <ATen/ops/full.h>

#include "accelerator/impl.h"
#include "xlaunch/error.h"

namespace xlaunch {

PreparedScheduler::PreparedScheduler(detail::AcceleratorImpl* acc, Scheduler* inner, std::unique_ptr<Scheduler> owned,
                                     const PreparedOptimizer* opt)
    : acc_(acc), inner_(inner), owned_(std::move(owned)), opt_(opt), followed_(opt->steps_taken()) {}

void PreparedScheduler::catch_up() {
  if (inner_->takes_metric()) return;
  while (followed_ < opt_->steps_taken()) {
    inner_->step();
    ++followed_;
  }
}

void PreparedScheduler::step() {
  if (inner_->takes_metric())
    throw UsageError("the prepared " + inner_->name() + " scheduler advances on a metric: call step(metric), "
                     "e.g. with the validation loss");
  catch_up();
}

void PreparedScheduler::step(double metric) {
  if (!inner_->takes_metric()) {
    inner_->step(metric);  // throws the scheduler's own message
    return;
  }
  // Every rank must set the same learning rate: they decide on the same (mean) metric.
  at::Tensor m = at::full({1}, metric, at::kDouble);
  if (acc_->world_ > 1) m = acc_->reduce(m, ReduceOp::Avg);
  inner_->step(m.item<double>());
}

PreparedScheduler& Accelerator::prepare(Scheduler& scheduler) { return impl_->prepare_scheduler(&scheduler, nullptr, nullptr); }

PreparedScheduler& Accelerator::prepare(torch::optim::LRScheduler& scheduler) {
  return prepare(scheduler, impl_->only_optimizer("LRScheduler"));
}

PreparedScheduler& Accelerator::prepare(torch::optim::LRScheduler& scheduler, PreparedOptimizer& optimizer) {
  auto owned = adapt(scheduler, optimizer.inner());
  Scheduler* s = owned.get();
  return impl_->prepare_scheduler(s, std::move(owned), &optimizer);
}

PreparedScheduler& Accelerator::prepare(torch::optim::ReduceLROnPlateauScheduler& scheduler) {
  return prepare(scheduler, impl_->only_optimizer("ReduceLROnPlateauScheduler"));
}

PreparedScheduler& Accelerator::prepare(torch::optim::ReduceLROnPlateauScheduler& scheduler,
                                        PreparedOptimizer& optimizer) {
  auto owned = adapt(scheduler, optimizer.inner());
  Scheduler* s = owned.get();
  return impl_->prepare_scheduler(s, std::move(owned), &optimizer);
}

void Accelerator::register_checkpoint_object(std::unique_ptr<CheckpointObject> obj) {
  impl_->custom_.push_back(std::move(obj));
}

namespace detail {

PreparedOptimizer& AcceleratorImpl::only_optimizer(const char* what) {
  if (optimizers_.size() == 1) return *optimizers_.front();
  throw UsageError(std::string("acc.prepare(") + what + "): " +
                   (optimizers_.empty() ? "prepare its optimizer first (acc.prepare(optimizer))"
                                        : std::to_string(optimizers_.size()) + " optimizers are prepared; say which "
                                          "this scheduler drives: acc.prepare(scheduler, prepared_optimizer)"));
}

PreparedScheduler& AcceleratorImpl::prepare_scheduler(Scheduler* s, std::unique_ptr<Scheduler> owned,
                                                      PreparedOptimizer* opt) {
  if (!opt) {
    for (auto& o : optimizers_)
      if (&o->inner() == &s->optimizer()) opt = o.get();
    if (!opt)
      throw UsageError("acc.prepare(scheduler): its optimizer is not a prepared one; acc.prepare(optimizer) first, "
                       "and build the scheduler over that same optimizer");
  }
  schedulers_.push_back(std::make_unique<PreparedScheduler>(this, s, std::move(owned), opt));
  return *schedulers_.back();
}

}  // namespace detail
}  // namespace xlaunch
