// The gradient reducer: data-parallel gradient averaging, overlapped with backward.
//
// The bucket-ready protocol, per synced backward:
//  1. prepare_for_backward() arms the reducer (sync or local accumulation).
//  2. Autograd accumulates a parameter's gradient, then our post-hook on its AccumulateGrad node
//     runs: the gradient is made to live where the communicator can reduce it (see Memory below),
//     and the parameter is marked ready.
//  3. When every parameter of a bucket is ready, and every earlier bucket has been started, the
//     bucket's allreduce (average) starts at once on the communicator (MPI: its communication
//     thread; NCCL: its stream) while backward keeps computing. Buckets start in index order on
//     every rank, so collectives match across ranks.
//  4. finalize_backward() starts any bucket still waiting (parameters that got no gradient are
//     zero-filled first, so every rank issues the same collectives and nothing hangs), waits for
//     all of them, and then reports unused parameters as an error unless find_unused_parameters.
// After it returns, each param.grad holds the gradient averaged over all ranks.
//
// Memory: every bucket is one flat buffer, allocated by the communicator (shared memory for CPU
// ranks on one machine), and param.grad starts as a view into it. When zero_grad resets gradients
// to none, autograd allocates fresh ones:
//  - shared-memory communicator: during backward those allocations are served from a shared pool
//    the other ranks have mapped (grad_capture.h), and each bucket's gradients are reduced in place
//    there, as one coalesced allreduce: no copy at all. A gradient that missed the pool (full, or
//    made outside backward) is copied into its bucket slot instead.
//  - MPI and NCCL: the fresh gradient is copied into its bucket slot once, param.grad becomes that
//    view again, and the flat bucket is reduced. With zero_grad(set_to_none=false) gradients stay
//    views and autograd accumulates into them: no copy.
// During local accumulation (no sync) nothing is communicated and gradients accumulate in place.
//
// Communication hooks (ReducerOptions::comm_hook, as PyTorch's DDP register_comm_hook), for
// floating-point buckets; gradients are then always copied into their bucket first:
//  - fp16 / bf16: the bucket is divided by the world size, cast, summed in 16 bits and cast back
//    (Communicator::allreduce_compressed_async): half the bytes.
//  - powersgd: low-rank approximation of each weight matrix with error feedback (ddp/powersgd.h),
//    after powersgd_start_step synced backwards reduced exactly (the first steps move the most).
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "xlaunch/communicator.h"

namespace torch::autograd {
struct Node;
}

namespace xlaunch {

class GradCapture;
class SharedPool;

struct ReducerOptions {
  double bucket_cap_mb = 25.0;
  int64_t first_bucket_bytes = 1 << 20;
  bool find_unused_parameters = false;
  // How each bucket travels (see "Communication hooks" above): none, fp16, bf16 or powersgd.
  std::string comm_hook = "none";
  int powersgd_rank = 1;              // rank of the approximation of each weight matrix
  int64_t powersgd_start_step = 1000; // synced backwards reduced exactly before PowerSGD starts
};

// Which communicator reduces tensors on a device (MPI for CPU, NCCL for CUDA).
using CommunicatorForDevice = std::function<std::shared_ptr<Communicator>(const at::Device&)>;

class Reducer {
 public:
  // params: the trainable parameters in registration order, with their names (for messages).
  Reducer(std::vector<at::Tensor> params, std::vector<std::string> names, CommunicatorForDevice comm_for,
          ReducerOptions options);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Call before each backward of a prepared model. sync=false accumulates locally (no_sync).
  void prepare_for_backward(bool sync);
  // Call after backward returns; see the protocol above. Throws UsageError on unused parameters
  // (after the collectives completed) unless find_unused_parameters.
  void finalize_backward();

  const std::vector<std::vector<size_t>>& buckets() const { return plan_; }
  // A line per bucket ("bucket 0: 3 params, 262144 elements, float@cpu"), identical on ranks that agree.
  std::string layout() const;
  size_t num_params() const { return params_.size(); }

  // The communication hook's state for checkpoints (empty unless powersgd): "sync_steps", and per
  // bucket "bucket.<b>.q" and this rank's "bucket.<b>.error.<k>" (see ddp/powersgd.h). Live tensors.
  std::vector<std::pair<std::string, at::Tensor>> hook_state() const;
  // "" when `saved` (a hook_state(), errors optional) fits this reducer, else why not.
  std::string hook_state_mismatch(const std::vector<std::pair<std::string, at::Tensor>>& saved) const;
  // Restores it; errors missing from `saved` restart from zero.
  void load_hook_state(const std::vector<std::pair<std::string, at::Tensor>>& saved);
  // Synced backward passes so far (PowerSGD starts after powersgd_start_step of them).
  int64_t sync_steps() const { return sync_steps_; }

  // Tests and profiling: called (under the reducer's lock) as each bucket's allreduce is started.
  void set_launch_observer(std::function<void(size_t bucket)> fn) { on_launch_ = std::move(fn); }

 private:
  struct Bucket;
  void on_grad_ready(size_t param);
  void launch_ready_buckets();
  void install_hooks();
  void reserve_pools();
  // Whether the bucket's communicator can reduce `grad` (of the member at `pos`) where it lies.
  bool in_place_ok(const Bucket& bucket, size_t pos, const at::Tensor& grad) const;

  std::vector<at::Tensor> params_;
  std::vector<std::string> names_;
  ReducerOptions options_;
  std::vector<std::vector<size_t>> plan_;
  std::vector<Bucket> buckets_;
  std::vector<std::pair<size_t, size_t>> slot_of_;  // param -> (bucket, position)
  std::vector<char> ready_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<uintptr_t> hook_keys_;
  std::vector<SharedPool*> pools_;       // owned by the communicators
  std::vector<size_t> capture_sizes_;    // gradient byte sizes served from pools_ during backward
  std::unique_ptr<GradCapture> capture_;  // alive from prepare_for_backward to finalize_backward

  std::mutex mu_;  // hooks may run on several autograd threads (one per CUDA device)
  bool armed_ = false;
  bool sync_ = true;
  size_t next_launch_ = 0;
  std::function<void(size_t)> on_launch_;
  enum class Hook { None, Fp16, Bf16, PowerSgd } hook_ = Hook::None;
  int64_t sync_steps_ = 0;
  bool powersgd_now_ = false;  // this backward compresses (sync_steps_ >= powersgd_start_step)
};

}  // namespace xlaunch
