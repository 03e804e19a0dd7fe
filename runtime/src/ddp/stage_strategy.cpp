#include "ddp/stage_strategy.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <c10/util/strides.h>

#include <algorithm>
#include <iterator>

#include "check.h"
#include "xlaunch/error.h"

namespace xlaunch {

at::Tensor bucket_alias(const at::Tensor& buffer, int64_t offset, at::IntArrayRef sizes) {
  at::NoGradGuard no_grad;
  at::Tensor t = at::empty({0}, buffer.options());
  t.set_(buffer.storage(), buffer.storage_offset() + offset, sizes, c10::contiguous_strides(sizes));
  return t;
}

std::string group_of(const at::Tensor& t) {
  return std::string(at::toString(t.scalar_type())) + "@" + t.device().str();
}

std::unique_ptr<StageStrategy> make_stage_strategy(StageContext ctx) {
  using Factory = std::unique_ptr<StageStrategy> (*)(StageContext);
  struct Row {
    int stage;
    Factory make;
  };
#define XLAUNCH_ZERO_STAGE_ROW(stage, name, meaning) Row{stage, &make_zero_stage_##stage},
  static constexpr Row kRows[] = {XLAUNCH_ZERO_STAGES(XLAUNCH_ZERO_STAGE_ROW)};
#undef XLAUNCH_ZERO_STAGE_ROW
  const int wanted = ctx.options.zero_stage;
  for (const Row& row : kRows)
    if (row.stage == wanted) return row.make(ctx);
  throw UsageError("zero_stage " + std::to_string(wanted) + " is not built: set ddp.zero_stage to " +
                   zero_stage_choices(/*with_meanings=*/true));
}

at::Tensor StageStrategy::add_bucket(ReducerBucket& bucket, bool last) {
  const std::vector<size_t>& ids = members(bucket);
  // The last bucket's tail: the control element, then one contributor element per rank.
  const int64_t tail = last ? 1 + bucket.comm->size() : 0;
  const at::TensorOptions options = ctx_.params[ids.front()].options().requires_grad(false);
  bucket.buffer = bucket.comm->allocate(bucket.elements + tail, options);
  int64_t offset = 0;
  for (size_t i : ids) {
    bucket.views.push_back(bucket_alias(bucket.buffer, offset, ctx_.params[i].sizes()));
    offset += ctx_.params[i].numel();
  }
  // The tail after every gradient, so the members' offsets are as without it: one entry of `views`
  // for the hooks, over the control element and the contributors.
  if (last) bucket.views.push_back(bucket_alias(bucket.buffer, bucket.elements, {tail}));
  // Gradients live in the bucket from the start; an existing gradient is kept.
  for (size_t pos = 0; pos < ids.size(); ++pos) {
    at::Tensor& grad = ctx_.params[ids[pos]].mutable_grad();
    if (grad.defined()) bucket.views[pos].copy_(grad);
    grad = bucket.views[pos];
  }
  return last ? bucket.views.back() : at::Tensor();
}

void StageStrategy::zero_slot(ReducerBucket& bucket, size_t pos, at::Tensor& grad) {
  bucket.views[pos].zero_();
  grad = bucket.views[pos];
}

at::Tensor StageStrategy::reduced_grad(const ReducerBucket& bucket, int64_t offset, int64_t length) const {
  return bucket.buffer.narrow(0, offset, length);
}

std::vector<at::Tensor> StageStrategy::reduced_grads() const {
  std::vector<at::Tensor> out;
  for (const auto& p : ctx_.params) out.push_back(p.grad());
  return out;
}

at::Tensor StageStrategy::grad_shard(const ReducerBucket& bucket, int64_t begin, int64_t end) const {
  return bucket.buffer.narrow(0, begin, end - begin);
}

std::vector<at::Tensor> StageStrategy::grad_shards() const {
  std::vector<at::Tensor> out;
  for (const ReducerBucket& bucket : ctx_.buckets) {
    const int64_t begin = bucket.shard * bucket.shard_comm->rank(), end = std::min(bucket.elements, begin + bucket.shard);
    if (end > begin) out.push_back(grad_shard(bucket, begin, end));
  }
  return out;
}

std::shared_ptr<Work> StageStrategy::gather_params(ReducerBucket& bucket) {
  XLAUNCH_ASSERT(bucket.params.defined(), "gather_params_async at zero_stage >= 1");
  const int world = bucket.shard_comm->size(), rank = bucket.shard_comm->rank();
  if (world == 1 || bucket.shard == 0) return completed_work();
  return bucket.shard_comm->allgather_async(bucket.params.narrow(0, bucket.shard * rank, bucket.shard), bucket.params);
}

void ShardedStage::shard_params(ReducerBucket& bucket) {
  const std::vector<size_t>& ids = members(bucket);
  const int world = bucket.shard_comm->size();
  // Allocated by the communicator: over shared memory the allgather copies the shards where they lie.
  const at::TensorOptions options = ctx_.params[ids.front()].options().requires_grad(false);
  bucket.params = bucket.shard_comm->allocate(bucket.shard * world, options);
  at::NoGradGuard no_grad;
  int64_t offset = 0;
  for (size_t i : ids) {
    at::Tensor view = bucket_alias(bucket.params, offset, ctx_.params[i].sizes());
    view.copy_(ctx_.params[i]);
    // The parameter keeps its identity (the optimizer and the module hold it), now over the flat buffer.
    ctx_.params[i].set_data(view);
    offset += ctx_.params[i].numel();
  }
  bucket.params.narrow(0, offset, bucket.params.numel() - offset).zero_();
}

std::string ShardedStage::describe(const ReducerBucket& bucket) const {
  return ", zero stage " + std::to_string(stage()) + ": " + std::to_string(bucket.shard_comm->size()) + " shards of " +
         std::to_string(bucket.shard);
}

}  // namespace xlaunch
