// The CUDA stage of the loader and the environment pool: pinned collation, the host-to-device copy on a side stream, and the
// hand-over to the training thread's stream. Built only with CUDA device paths.
//
// Stream protocol, per batch:
//  1. A worker collates into pinned memory from LibTorch's caching host allocator.
//  2. The worker copies it to the device non_blocking on the loader's side stream: the device
//     memory is allocated on (and owned by) the side stream, and the host allocator records an
//     event on the side stream for the pinned block, so the block is reused only once the copy
//     has read it (the worker can drop its reference at once).
//  3. The worker records an event on the side stream after the copy.
//  4. The training thread, at hand-over, makes its current stream wait for that event (a device-
//     side wait, no host synchronisation) and records the device memory on its current stream, so
//     the caching allocator does not hand the memory to the side stream again while the step that
//     reads the batch may still be running.
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/cuda.h>

#include "data/loader_stage.h"

namespace xlaunch::detail {
namespace {

class CudaStage final : public DeviceStage {
 public:
  CudaStage(c10::Device device, bool pin_memory)
      : device_(device),
        pin_(pin_memory),
        copy_stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index())) {}

  at::Tensor host_empty(at::IntArrayRef sizes, at::ScalarType dtype) const override {
    return at::empty(sizes, at::TensorOptions().dtype(dtype).pinned_memory(pin_));
  }

  std::shared_ptr<void> start_copy(at::ArrayRef<at::Tensor*> tensors) const override {
    c10::cuda::CUDAGuard device_guard(device_);
    c10::cuda::CUDAStreamGuard stream_guard(copy_stream_);
    const auto on_device = at::TensorOptions().device(device_);
    for (at::Tensor* t : tensors)
      if (t->defined()) *t = t->to(on_device, /*non_blocking=*/true);
    auto copied = std::make_shared<c10::cuda::CUDAEvent>();
    copied->record(copy_stream_);
    return copied;
  }

  void hand_over(at::ArrayRef<at::Tensor*> tensors, const std::shared_ptr<void>& fence) const override {
    const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(device_.index());
    static_cast<c10::cuda::CUDAEvent*>(fence.get())->block(current);
    for (at::Tensor* t : tensors)
      if (t->defined()) t->record_stream(current);
  }

  std::string describe() const override {
    return device_.str() + (pin_ ? " (pinned host batches, side-stream copy)" : " (pageable host batches)");
  }

 private:
  c10::Device device_;
  bool pin_;
  c10::cuda::CUDAStream copy_stream_;
};

}  // namespace

std::shared_ptr<const DeviceStage> make_cuda_stage(c10::Device device, bool pin_memory, const std::string& user) {
  if (!torch::cuda::is_available())
    throw UsageError(user + ": device " + device.str() + " asked for, but no CUDA device is visible "
                     "(torch::cuda::is_available() is false); use the CPU, or check "
                     "CUDA_VISIBLE_DEVICES and the driver");
  if (!device.has_index()) device = c10::Device(c10::kCUDA, c10::cuda::current_device());
  return std::make_shared<CudaStage>(device, pin_memory);
}

}  // namespace xlaunch::detail
