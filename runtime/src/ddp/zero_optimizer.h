// The prepared optimizer at ZeRO stage 1 or 2 (docs/memory.md): the user's optimizer, unchanged,
// over this rank's shards of the prepared models' parameters.
//
// At prepare, each parameter group's parameters are replaced by this rank's pieces of them
// (ddp/zero_layout.h): flat views of the reducer's per-bucket parameter buffers, one per run of a
// bucket's shard that belongs to one group. Each piece's gradient is a view of the reduced
// gradients (Reducer::reduced_grad), so the optimizer keeps state only for 1/W of the elements and
// reads no gradient outside its shard. After it steps, gather() allgathers the updated shards, and
// every rank holds the whole updated model again.
//
// Any optimizer whose update is elementwise works as it is (SGD, Adam, AdamW, RMSprop, Adagrad, and
// the user's own of that kind): the group options (learning rate, weight decay, ...) stay per group.
// LBFGS is refused: its line search takes dot products over all of its parameters.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>

#include <cstddef>
#include <string>
#include <vector>

#include "ddp/zero_layout.h"

namespace xlaunch {

class Reducer;

class ShardedOptimizer {
 public:
  // One prepared model's reducer, and that model's index (for checkpoints and messages).
  struct Model {
    Reducer* reducer;
    size_t id;
  };
  // Rebinds `optimizer` (which must hold no state yet). Throws UsageError naming the cause when a
  // parameter of it belongs to no prepared model, or the optimizer cannot be sharded.
  ShardedOptimizer(torch::optim::Optimizer& optimizer, std::vector<Model> models);

  // Points every piece's gradient at its reduced gradients (done at prepare; again before each step,
  // in case the inner optimizer's zero_grad dropped them).
  void bind_grads();
  // Allgathers every bucket this optimizer steps (all started, then all waited for).
  void gather();
  // The bytes one gather() gathers into this rank's parameters (the padded buckets; 0 alone).
  int64_t gathered_bytes() const;
  // The models' parameters as the user's optimizer held them: per group, in group order.
  const std::vector<std::vector<at::Tensor>>& original_params() const { return original_; }
  // Each piece, group by group in the order the optimizer's groups now hold them.
  struct Bound {
    size_t model;  // index into the models given
    zero::Piece piece;
    at::Tensor tensor;  // what the optimizer holds
  };
  const std::vector<std::vector<Bound>>& pieces() const { return bound_; }
  // The models given (Bound::model indexes them): checkpoints name a piece's segments through them.
  const std::vector<Model>& models() const { return models_; }

 private:
  torch::optim::Optimizer& optimizer_;
  std::vector<Model> models_;
  std::vector<std::vector<at::Tensor>> original_;
  std::vector<std::vector<Bound>> bound_;  // per group
  std::vector<std::pair<size_t, size_t>> buckets_;  // (model, bucket) holding any piece
};

}  // namespace xlaunch
