#include "ddp/zero_optimizer.h"

#include <ATen/ops/full_like.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/lbfgs.h>

#include <algorithm>
#include <map>

#include "check.h"
#include "xlaunch/error.h"
#include "xlaunch/extend/communicator.h"
#include "xlaunch/reducer.h"
#include "xlaunch/zero_stages.h"

namespace xlaunch {

ShardedOptimizer::ShardedOptimizer(torch::optim::Optimizer& optimizer, std::vector<Model> models)
    : optimizer_(optimizer), models_(std::move(models)) {
  if (dynamic_cast<torch::optim::LBFGS*>(&optimizer))
    throw UsageError("acc.prepare(optimizer): LBFGS cannot be sharded (ddp.zero_stage >= 1): its line search takes "
                     "dot products over all of its parameters, which no rank holds alone. Use zero_stage 0 with LBFGS");
  // Adagrad makes its state (step 0, the initial accumulator) in its constructor: made again below for
  // the pieces. Any other state means the optimizer has stepped.
  auto* adagrad = dynamic_cast<torch::optim::Adagrad*>(&optimizer);
  bool fresh = optimizer.state().empty();
  if (adagrad) {
    fresh = true;
    for (const auto& [impl, state] : optimizer.state())
      if (static_cast<const torch::optim::AdagradParamState&>(*state).step() != 0) fresh = false;
  }
  if (!fresh)
    throw UsageError("acc.prepare(optimizer): the optimizer already has state (it has stepped), and ddp.zero_stage >= 1 "
                     "rebinds it to this rank's shard of the parameters. Prepare it before its first step; to continue a "
                     "run, prepare a fresh optimizer and acc.load_state the checkpoint");
  // Which group each parameter of each model is in.
  std::map<const void*, int> group_of;
  auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    original_.push_back(groups[g].params());
    for (const at::Tensor& p : groups[g].params()) group_of[p.unsafeGetTensorImpl()] = static_cast<int>(g);
  }
  size_t found = 0;
  std::vector<std::vector<zero::Piece>> per_model;
  for (const Model& m : models_) {
    const auto& params = m.reducer->params();
    const std::vector<int64_t>& numel = m.reducer->numels();
    std::vector<int> group;
    for (const at::Tensor& p : params) {
      const auto it = group_of.find(p.unsafeGetTensorImpl());
      group.push_back(it == group_of.end() ? -1 : it->second);
      if (it != group_of.end()) ++found;
    }
    per_model.push_back(zero::pieces_of_rank(m.reducer->buckets(), numel, group, m.reducer->shard_world(), m.reducer->shard_rank()));
    // Every bucket holding any of the optimizer's parameters is gathered, on every rank alike: also
    // where this rank's shard of it is padding only, or parameters the optimizer does not hold.
    const auto& plan = m.reducer->buckets();
    for (size_t b = 0; b < plan.size(); ++b)
      if (std::any_of(plan[b].begin(), plan[b].end(), [&](size_t i) { return group[i] >= 0; }))
        buckets_.emplace_back(per_model.size() - 1, b);
  }
  if (found != group_of.size())
    throw UsageError("acc.prepare(optimizer): " + std::to_string(group_of.size() - found) + " of the optimizer's " +
                     std::to_string(group_of.size()) + " parameters belong to no prepared model (or are frozen). With "
                     "ddp.zero_stage >= 1 the optimizer steps shards of the prepared models' trainable parameters: "
                     "prepare the model before the optimizer, and build the optimizer over its trainable parameters");
  bound_.resize(groups.size());
  for (size_t m = 0; m < per_model.size(); ++m) {
    for (const zero::Piece& piece : per_model[m]) {
      at::Tensor t = models_[m].reducer->param_piece(piece.bucket, piece.offset, piece.length);
      bound_[static_cast<size_t>(piece.group)].push_back(Bound{m, piece, t});
    }
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    std::vector<at::Tensor> tensors;
    for (const Bound& b : bound_[g]) tensors.push_back(b.tensor);
    groups[g].params() = std::move(tensors);
  }
  if (adagrad) {
    optimizer.state().clear();
    for (size_t g = 0; g < groups.size(); ++g) {
      const double init = static_cast<const torch::optim::AdagradOptions&>(groups[g].options()).initial_accumulator_value();
      for (const Bound& b : bound_[g]) {
        auto state = std::make_unique<torch::optim::AdagradParamState>();
        state->step(0);
        state->sum(at::full_like(b.tensor, init));
        optimizer.state()[b.tensor.unsafeGetTensorImpl()] = std::move(state);
      }
    }
  }
  bind_grads();
}

void ShardedOptimizer::bind_grads() {
  // Groups added (add_param_group) or changed after prepare would hold whole parameters whose
  // gradients do not exist at stage 2 and whose buckets nobody gathers.
  const auto& groups = optimizer_.param_groups();
  bool same = groups.size() == bound_.size();
  for (size_t g = 0; same && g < groups.size(); ++g) same = groups[g].params().size() == bound_[g].size();
  if (!same)
    throw UsageError("the prepared optimizer's parameter groups changed after acc.prepare(optimizer) (add_param_group?): "
                     "with ddp.zero_stage >= 1 they were rebound to this rank's shard at prepare. Build every group "
                     "before prepare (one to unfreeze later with lr 0), or use zero_stage 0");
  for (auto& group : bound_)
    for (Bound& b : group) {
      b.tensor.mutable_grad() = models_[b.model].reducer->reduced_grad(b.piece.bucket, b.piece.offset, b.piece.length);
    }
}

int64_t ShardedOptimizer::gathered_bytes() const {
  int64_t bytes = 0;
  for (const auto& [m, b] : buckets_) {
    const Reducer& r = *models_[m].reducer;
    // Stage 3 gathers nothing after the step (its units are gathered for their forward).
    if (r.shard_world() > 1 && !shards_parameters(r.zero_stage()))
      bytes += r.bucket_shard(b) * r.shard_world() * static_cast<int64_t>(r.params()[r.buckets()[b].front()].element_size());
  }
  return bytes;
}

void ShardedOptimizer::gather() {
  std::vector<std::shared_ptr<Work>> works;
  for (const auto& [m, b] : buckets_) works.push_back(models_[m].reducer->gather_params_async(b));
  for (auto& w : works) w->wait();
}

}  // namespace xlaunch
