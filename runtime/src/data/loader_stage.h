// Private to the runtime: where batches are collated and how they reach the device, for the loader
// and the environment pool (rl/env_pool.cpp). The CPU stage is in loader_stage.cpp; the CUDA stage
// in loader_cuda.cpp (built with device paths only).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <memory>
#include <string>

#include "xlaunch/dataset.h"

namespace xlaunch::detail {

class DeviceStage {
 public:
  virtual ~DeviceStage() = default;
  // On a worker: the tensor a batch is collated into.
  virtual at::Tensor host_empty(at::IntArrayRef sizes, at::ScalarType dtype) const = 0;
  // On a worker, after collation: start moving `tensors` to the device, replacing each (undefined
  // ones are skipped) by its device copy. Returns what hand_over needs to order the training
  // thread after the move (nullptr: nothing).
  virtual std::shared_ptr<void> start_copy(at::ArrayRef<at::Tensor*> tensors) const = 0;
  // On the training thread, before the tensors are returned to the training loop.
  virtual void hand_over(at::ArrayRef<at::Tensor*> tensors, const std::shared_ptr<void>& fence) const = 0;
  virtual std::string describe() const = 0;

  // The loader's batch: its data and target.
  std::shared_ptr<void> start_copy(Batch& batch) const { return start_copy({&batch.data, &batch.target}); }
  void hand_over(Batch& batch, const std::shared_ptr<void>& fence) const {
    hand_over({&batch.data, &batch.target}, fence);
  }
};

// CPU when device is the CPU; the CUDA stage for a CUDA device (UsageError when this build or
// this machine has no CUDA). `user` names the caller in messages ("Loader", "EnvPool").
std::shared_ptr<const DeviceStage> make_device_stage(c10::Device device, bool pin_memory,
                                                     const std::string& user = "Loader");

#if XLAUNCH_HAVE_CUDA
std::shared_ptr<const DeviceStage> make_cuda_stage(c10::Device device, bool pin_memory, const std::string& user);
#endif

}  // namespace xlaunch::detail
