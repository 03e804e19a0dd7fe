// The Accelerator's collectives on the user's data (Accelerate's gather, gather_for_metrics,
// pad_across_processes, gather_object, broadcast_object, reduce, broadcast, wait_for_everyone),
// over comm/ (ragged rows, objects as bytes) and data/ (metrics), and set_seed.
#include <torch/utils.h>

#include "accelerator/impl.h"
#include "comm/object_exchange.h"
#include "comm/ragged.h"
#include "xlaunch/error.h"
#include "xlaunch/metrics.h"

namespace xlaunch {

at::Tensor Accelerator::gather_for_metrics(const at::Tensor& t) {
  if (impl_->loaders_.empty())
    throw UsageError("gather_for_metrics needs a loader prepared with acc.prepare(loader), to know which "
                     "samples are padding; or pass the loader: gather_for_metrics(t, loader)");
  return gather_for_metrics(t, *impl_->loaders_.back());
}

at::Tensor Accelerator::gather_for_metrics(const at::Tensor& t, const Loader& loader) {
  return xlaunch::gather_for_metrics(*impl_->communicator(t.device()), t, loader.last_span());
}

at::Tensor Accelerator::gather(const at::Tensor& t) {
  const at::Tensor src = t.defined() && t.dim() == 0 ? t.reshape({1}) : t;
  // The shapes go through the CPU communicator whatever the device, and before communicator() may
  // create the NCCL one (a collective of its own): a rank whose tensor is on another device is
  // named, instead of the ranks waiting in different collectives.
  const std::vector<int64_t> rows = agree_on_rows(*impl_->cpu_comm_, src, "gather");
  return gather_agreed_rows(*impl_->communicator(src.device()), src, rows);
}

at::Tensor Accelerator::pad_across_processes(const at::Tensor& t, int64_t dim, const at::Scalar& pad_index,
                                             bool pad_first) {
  return pad_across(*impl_->cpu_comm_, t, dim, pad_index, pad_first);
}

std::vector<std::string> Accelerator::gather_object_bytes(const std::string& mine) {
  return gather_bytes(*impl_->cpu_comm_, mine, impl_->options_.max_object_bytes);
}

std::string Accelerator::broadcast_object_bytes(const std::string& mine, int from) {
  return broadcast_bytes(*impl_->cpu_comm_, mine, from, impl_->options_.max_object_bytes);
}

at::Tensor Accelerator::reduce(const at::Tensor& t, ReduceOp op) { return impl_->reduce(t, op); }

void Accelerator::broadcast(at::Tensor& t, int from) {
  if (t.is_contiguous()) {
    impl_->communicator(t.device())->broadcast(t, from);
  } else {
    at::Tensor c = t.contiguous();
    impl_->communicator(t.device())->broadcast(c, from);
    t.copy_(c);
  }
}

void Accelerator::wait_for_everyone() { impl_->cpu_comm_->barrier(); }

Accelerator::MainProcessFirst::MainProcessFirst(Accelerator& acc) : acc_(acc) {
  if (!acc_.is_main_process()) acc_.wait_for_everyone();
}
Accelerator::MainProcessFirst::~MainProcessFirst() {
  if (acc_.is_main_process()) acc_.wait_for_everyone();
}

void Accelerator::set_seed(uint64_t seed, bool device_specific) {
  torch::manual_seed(seed + (device_specific ? static_cast<uint64_t>(impl_->rank_) : 0));
}

namespace detail {

at::Tensor AcceleratorImpl::reduce(const at::Tensor& t, ReduceOp op) {
  at::Tensor out = t.detach().clone().contiguous();
  communicator(out.device())->allreduce(out, op);
  return out;
}

}  // namespace detail
}  // namespace xlaunch
