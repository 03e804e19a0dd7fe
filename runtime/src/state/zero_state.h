// Optimizer state in checkpoints at ZeRO stages 1 and 2, and resharding it on load
// (docs/checkpointing.md, "Sharded optimizer state"). Used by save_state / load_state
// (state/run_save.cpp, run_load.cpp); generic over the optimizer's type.
//
// Saving: every rank's optimizer save()s its own pieces; rank 0 writes each rank's file and the
// layout (state/sharded_layout.h) that names what each piece holds.
// Loading, on any world size and stage: this rank's tensors (its pieces, or at stage 0 its whole
// parameters) are assembled from the saved pieces that overlap them, read from the saved ranks'
// files one at a time. Each saved state entry is either elementwise (a tensor of dim >= 1 with
// as many elements as its piece: momentum, Adam's moments; re-sliced by segments) or per piece (a
// step count, a 0-dim tensor: taken from the saved piece that holds the new tensor's first
// element). The result is an archive in LibTorch's optimizer format, which the optimizer's own
// load() reads, so any optimizer whose state is elementwise works (SGD, Adam, AdamW, RMSprop,
// Adagrad).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/input-archive.h>

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "state/sharded_layout.h"

namespace xlaunch {

class Reducer;
class ShardedOptimizer;

namespace checkpoint {

// The prepared models' reducers, by model index.
using Reducers = std::vector<const Reducer*>;

// A tensor the optimizer holds on this rank, with what it is made of.
struct HeldTensor {
  PieceLayout layout;
  at::Tensor tensor;
};
using HeldGroups = std::vector<std::vector<HeldTensor>>;  // per group, in the group's order

// What the optimizer holds on this rank: its pieces when sharded (ZeRO stage >= 1), else its
// parameters, whole. Throws UsageError for a parameter that belongs to no prepared model (its
// elements cannot be named).
HeldGroups held_tensors(const torch::optim::Optimizer& inner, const ShardedOptimizer* sharded, const Reducers& reducers);
// The optimizer's parameters as the program gave them (before sharding), by name.
std::vector<ParamLayout> params_of(const torch::optim::Optimizer& inner, const ShardedOptimizer* sharded,
                                   const Reducers& reducers);
// A stage-0 checkpoint's optimizer file as a layout: one file whose pieces are `params` whole
// (this run's parameters, taken to be in the saved groups in the same order: the same program).
OptimizerLayout whole_layout(const std::vector<ParamLayout>& params, int groups);

// Reads the optimizer file of saved rank r (collective-free; throws UsageError when missing).
using RankFile = std::function<std::unique_ptr<torch::serialize::InputArchive>(int rank)>;

struct Resharded {
  std::unique_ptr<torch::serialize::InputArchive> archive;  // for inner.load()
  std::string note;  // something the user should know ("" when nothing), for the log
};

// This rank's state for `inner` (holding `held`), from a checkpoint whose optimizer files are laid
// out as `saved`. The group options are the saved ones, read through inner's own options type.
// Throws UsageError naming `what` (the checkpoint's optimizer), what differs and the fix, when the
// parameters, groups or state do not match.
Resharded reshard(const torch::optim::Optimizer& inner, const HeldGroups& held, const OptimizerLayout& saved,
                  const RankFile& rank_file, const at::Device& device, const std::string& what);

// The saved ranks whose files reshard reads for `held`: those holding any of its elements (rank 0
// alone when it holds nothing: every file gives the group options).
std::set<int> saved_ranks_needed(const OptimizerLayout& saved, const HeldGroups& held);

// Refuses (UsageError) when the saved layout's parameters differ from `mine` (params_of): in
// number of groups, or in the parameters of a group.
void check_same_params(const OptimizerLayout& saved, const std::vector<ParamLayout>& mine, int groups,
                       const std::string& what);

}  // namespace checkpoint
}  // namespace xlaunch
