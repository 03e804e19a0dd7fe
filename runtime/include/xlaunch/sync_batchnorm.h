// SyncBatchNorm: BatchNorm whose batch statistics are those of the whole batch, over every rank.
//
// With small per-rank batches, BatchNorm's statistics of one rank's slice are noisy; SyncBatchNorm
// (PyTorch's torch.nn.SyncBatchNorm) computes them over the concatenated batch of all ranks, so a
// training step equals BatchNorm on one process holding every rank's rows: the same outputs, the
// same input gradients, and (summed over the ranks, as the gradient reducer does) the same weight
// and bias gradients. Running statistics are updated from the global statistics, identically on
// every rank. In eval mode it normalises with the running statistics, with no communication.
//
// Two ways in:
//  - `sync_batchnorm: true` in the config (XLAUNCH_SYNC_BATCHNORM): acc.prepare(model) first
//    converts every torch::nn::BatchNorm1d/2d/3d of the model (convert_sync_batchnorm), then hands
//    every SyncBatchNorm the Accelerator's communicator.
//  - Declare the layers as xlaunch::SyncBatchNorm yourself (a drop-in for BatchNorm1d/2d/3d, same
//    options). acc.prepare hands them the communicator whatever the option says.
//
// LibTorch limits conversion: a C++ module calls its layers through its own members
// (`bn(x)` in NetImpl::forward), which no function outside it can reseat. So convert_sync_batchnorm
// replaces a BatchNorm only where the tree is all that holds it: in torch::nn::Sequential and
// ModuleList (whose forward goes through their entries, which it replaces in place) or a parent's
// registered children. A BatchNorm also held by a member of its parent (or anything else) is
// refused with UsageError naming it: declare that member as xlaunch::SyncBatchNorm instead.
//
// Every rank must run the same forward (the same SyncBatchNorm layers, in the same order, the same
// number of times): each training forward issues one allgather per layer, and each backward one
// allreduce, and collectives must match across ranks. No rank-dependent control flow around
// BatchNorm layers. A rank may hold 0 rows; the total over the ranks must exceed 1 value per
// channel (as BatchNorm requires of one process).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/options/batchnorm.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <ostream>

#include "xlaunch/extend/communicator.h"

namespace xlaunch {

class SyncBatchNormImpl : public torch::nn::Cloneable<SyncBatchNormImpl> {
 public:
  explicit SyncBatchNormImpl(int64_t num_features) : SyncBatchNormImpl(torch::nn::BatchNormOptions(num_features)) {}
  explicit SyncBatchNormImpl(const torch::nn::BatchNormOptions& options);
  // The tensors a SyncBatchNorm holds (undefined where its options have none).
  struct Tensors {
    at::Tensor weight, bias, running_mean, running_var, num_batches_tracked;
  };
  // Adopts `tensors` as they are (the same tensors, not copies): what convert_sync_batchnorm does.
  SyncBatchNormImpl(const torch::nn::BatchNormOptions& options, const Tensors& tensors);

  // Input [N, C], [N, C, L], [N, C, H, W] or [N, C, D, H, W] with C = num_features. Training mode
  // with a communicator: statistics over every rank's rows (collective, see above). Without a
  // communicator (not prepared yet): this rank's rows only, as torch::nn::BatchNorm does. Eval
  // mode: the running statistics, or (track_running_stats false) this rank's batch, as PyTorch.
  at::Tensor forward(const at::Tensor& input);

  // The ranks the statistics are reduced over; acc.prepare sets it. Null: local statistics.
  void set_communicator(std::shared_ptr<Communicator> comm) { comm_ = std::move(comm); }
  const std::shared_ptr<Communicator>& communicator() const { return comm_; }

  void reset() override;
  void pretty_print(std::ostream& stream) const override;

  torch::nn::BatchNormOptions options;
  // The names and meanings of torch::nn::BatchNorm's, so state dicts and checkpoints carry over.
  at::Tensor weight, bias;                                   // affine only
  at::Tensor running_mean, running_var, num_batches_tracked;  // track_running_stats only

 private:
  void register_tensors(const Tensors& t);
  std::shared_ptr<Communicator> comm_;
};
TORCH_MODULE(SyncBatchNorm);

// Replaces every torch::nn::BatchNorm1d/2d/3d below `module` (recursively) by a SyncBatchNorm with
// the same options that adopts its tensors: the parameters and buffers are the same tensors (not
// copies), so an optimizer built over the model before the conversion still updates them. Returns
// the number replaced. Throws UsageError naming a BatchNorm that is held outside the module tree
// (see above), before replacing anything. `module` itself is not replaced (convert its parent).
int convert_sync_batchnorm(torch::nn::Module& module);

// Hands `comm` to every SyncBatchNorm of the tree (`module` included). Returns how many there are.
int set_sync_batchnorm_communicator(torch::nn::Module& module, const std::shared_ptr<Communicator>& comm);

}  // namespace xlaunch
