// zero_stage 2: stages/stage2.h.
#include <ATen/core/grad_mode.h>
#include <ATen/ops/zeros.h>
#include <c10/util/accumulate.h>

#include <algorithm>
#include <deque>
#include <map>
#include <string>
#include <utility>

#include "check.h"
#include "comm/shared_memory.h"
#include "ddp/stages/stage2.h"
#include "xlaunch/error.h"

namespace xlaunch {

int64_t Stage2::numel_of(size_t param) const { return c10::multiply_integers(sizes_[param]); }

at::Tensor Stage2::add_bucket(ReducerBucket& bucket, bool last) {
  sizes_.resize(ctx_.params.size());
  for (size_t i : members(bucket)) sizes_[i] = ctx_.params[i].sizes().vec();
  place_params(bucket);
  const at::TensorOptions options = ctx_.params[members(bucket).front()].options().requires_grad(false);
  own_.emplace_back();
  own_.back().grad_shard = at::zeros({bucket.shard}, options);
  if (!last) return at::Tensor();
  tail_ = bucket.comm->allocate(1 + bucket.comm->size(), options);
  return tail_;
}

void Stage2::all_added() {
  // A bucket of one parameter whose size divides by W is reduce-scattered from the gradient itself,
  // except over shared memory, which reduces only its own memory. The others share a ring per
  // communicator and dtype, holding the largest of them and one more bucket: the next bucket's
  // gradients are copied while the one before is still being reduced.
  std::map<std::pair<Communicator*, std::string>, int> index;
  std::vector<int64_t> largest, total;
  const int64_t cap_elements = static_cast<int64_t>(ctx_.options.bucket_cap_mb * 1024 * 1024);
  for (ReducerBucket& bucket : ctx_.buckets) {
    const int64_t padded = bucket.shard * bucket.shard_comm->size();
    const bool direct = members(bucket).size() == 1 && padded == bucket.elements && !shared_memory(*bucket.shard_comm);
    if (direct || padded == 0) continue;
    const at::Tensor& first = ctx_.params[members(bucket).front()];
    const auto key = std::make_pair(bucket.shard_comm.get(), group_of(first));
    auto [it, added] = index.emplace(key, static_cast<int>(rings_.size()));
    if (added) {
      rings_.emplace_back();
      rings_.back().comm = bucket.shard_comm;
      rings_.back().options = first.options().requires_grad(false);
      largest.push_back(0);
      total.push_back(0);
    }
    own_[bucket.index].ring = it->second;
    largest[it->second] = std::max(largest[it->second], padded);
    total[it->second] += padded;
  }
  for (size_t k = 0; k < rings_.size(); ++k) {
    Ring& ring = rings_[k];
    const int64_t elements_per_cap = cap_elements / static_cast<int64_t>(ring.options.dtype().itemsize());
    const int64_t capacity = std::max(largest[k], std::min(total[k], largest[k] + elements_per_cap));
    ring.memory = ring.comm->allocate(capacity, ring.options);  // collective: every rank, same order
    ring.plan = std::make_unique<StagingRing>(capacity);
  }
}

std::shared_ptr<Work> Stage2::start(ReducerBucket& bucket, CommHook& hook) {
  const std::vector<size_t>& ids = members(bucket);
  Own& own = own_[bucket.index];
  const int64_t padded = bucket.shard * bucket.shard_comm->size();
  at::NoGradGuard no_grad;
  if (own.ring < 0) {
    // One parameter whose size divides by W: its gradient is the input (a zero one when it has none).
    const at::Tensor& param = ctx_.params[ids.front()];
    // (In the shard's dtype: at stage 3 with fsdp.param_dtype the gradient is in the lower one.)
    const at::TensorOptions options = own.grad_shard.options();
    own.input = param.grad().defined() ? param.grad().to(options.dtype()).contiguous().view({-1}) : at::zeros({padded}, options);
  } else {
    Ring& ring = rings_[static_cast<size_t>(own.ring)];
    int64_t at;
    while ((at = ring.plan->take(padded)) < 0) wait_oldest(static_cast<size_t>(own.ring));
    ring.holders.push_back(bucket.index);
    own.input = ring.memory.narrow(0, at, padded);
    int64_t offset = 0;
    for (size_t i : ids) {
      at::Tensor slot = own.input.narrow(0, offset, numel_of(i));
      const at::Tensor& grad = ctx_.params[i].grad();
      if (grad.defined()) slot.view(sizes_[i]).copy_(grad);
      else slot.zero_();
      offset += numel_of(i);
    }
    own.input.narrow(0, offset, padded - offset).zero_();
  }
  // The shard is what this rank keeps; the whole gradients go (the input holds what the
  // reduce-scatter still reads).
  for (size_t i : ids) ctx_.params[i].mutable_grad() = at::Tensor();
  bucket.buffer = own.input;
  std::shared_ptr<Work> work = hook.start_reduce_scatter(bucket, own.grad_shard);
  if (tail_.defined() && bucket.index + 1 == ctx_.buckets.size())
    tail_work_ = bucket.comm->allreduce_async(tail_, ReduceOp::Avg);
  return work;
}

void Stage2::wait_oldest(size_t ring_index) {
  Ring& ring = rings_[ring_index];
  XLAUNCH_ASSERT(!ring.holders.empty(), "a ring bucket larger than its ring");
  ReducerBucket& oldest = ctx_.buckets[ring.holders.front()];
  ring.holders.pop_front();
  if (oldest.work) {
    oldest.work->wait();
    oldest.work.reset();
  }
  own_[oldest.index].input = at::Tensor();
  oldest.buffer = at::Tensor();
  ring.plan->give_back_oldest();
}

void Stage2::all_waited() {
  // The whole gradients go with the inputs (which may be a member's own gradient).
  for (ReducerBucket& bucket : ctx_.buckets) {
    own_[bucket.index].input = at::Tensor();
    bucket.buffer = at::Tensor();
  }
  for (Ring& ring : rings_)
    while (!ring.holders.empty()) {
      ring.holders.pop_front();
      ring.plan->give_back_oldest();
    }
  if (tail_work_) {
    tail_work_->wait();
    tail_work_.reset();
  }
}

at::Tensor Stage2::reduced_grad(const ReducerBucket& bucket, int64_t offset, int64_t length) const {
  const int64_t begin = bucket.shard * bucket.shard_comm->rank();
  XLAUNCH_ASSERT(offset >= begin && offset + length <= begin + bucket.shard, "a range inside this rank's shard");
  return own_[bucket.index].grad_shard.narrow(0, offset - begin, length);
}

int64_t Stage2::reduce_scattered_bytes() const {
  int64_t bytes = 0;
  for (const ReducerBucket& bucket : ctx_.buckets)
    bytes += bucket.shard * bucket.shard_comm->size() * ctx_.params[members(bucket).front()].element_size();
  return bytes;
}

std::unique_ptr<StageStrategy> make_zero_stage_2(StageContext ctx) { return std::make_unique<Stage2>(ctx); }

}  // namespace xlaunch
