// The Accelerator's construction and the public calls that hand out its state (xlaunch/accelerator.h).
#include "accelerator/impl.h"
#include "algorithms/algorithms.h"
#include "profile/op_profile.h"

namespace xlaunch {

void detail::explain_refusal(const std::exception_ptr& e, const char* where) { algorithms::explain_refusal(e, where); }

Accelerator::Accelerator(AcceleratorOptions options) : Accelerator(std::move(options), nullptr) {}

Accelerator::Accelerator(AcceleratorOptions options, std::shared_ptr<Communicator> cpu_comm)
    : impl_(std::make_unique<detail::AcceleratorImpl>(std::move(options), std::move(cpu_comm))) {}

// A run that ends (or throws) before its profile_ops steps: the profiler stops here, with what it has.
Accelerator::~Accelerator() { profile::ops::finish(); }

int Accelerator::process_index() const { return impl_->rank_; }
int Accelerator::num_processes() const { return impl_->world_; }
int Accelerator::local_process_index() const { return impl_->local_rank_; }
const at::Device& Accelerator::device() const { return impl_->device_; }
const AcceleratorOptions& Accelerator::options() const { return impl_->options_; }
bool Accelerator::sync_gradients() const { return impl_->sync_gradients(); }
MixedPrecision Accelerator::mixed_precision() const { return impl_->mixed_precision_; }
GradScaler* Accelerator::scaler() { return impl_->scaler_.get(); }
int64_t Accelerator::step() const { return impl_->step_; }
Reducer& Accelerator::reducer(size_t model_id) { return *impl_->models_.at(model_id).reducer; }

std::shared_ptr<Communicator> Accelerator::communicator(const at::Device& device) { return impl_->communicator(device); }

std::shared_ptr<Communicator> Accelerator::bucket_communicator(const at::Device& device) {
  return impl_->bucket_communicator(device);
}

}  // namespace xlaunch
