// zero_stage 2 (xlaunch/reducer.h): each bucket's gradients are reduce-scattered, as the bucket
// becomes complete, into this rank's persistent shard, from the gradient itself (one parameter whose
// size divides by W, outside shared memory) or from a staging ring (ddp/staging_ring.h); then the
// members' gradients are released. The control element and the contributors travel in an
// allreduce of their own beside the last bucket. The parameters are sharded as at stage 1.
#include <ATen/core/grad_mode.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <deque>
#include <map>
#include <string>
#include <utility>

#include "check.h"
#include "comm/shared_memory.h"
#include "ddp/stage_strategy.h"
#include "ddp/staging_ring.h"
#include "xlaunch/error.h"

namespace xlaunch {
namespace {

class Stage2 final : public ShardedStage {
 public:
  using ShardedStage::ShardedStage;
  int stage() const override { return 2; }
  bool alone_from_cap() const override { return true; }
  void check_hook(const CommHook& hook) const override {
    const std::string why = hook.reduce_scatter_refusal();
    if (!why.empty())
      throw UsageError("ddp.comm_hook " + ctx_.options.comm_hook + " cannot be used with ddp.zero_stage 2: " + why +
                       ". Use zero_stage 1 with it, or comm_hook none, fp16 or bf16 with stage 2");
  }
  at::Tensor add_bucket(ReducerBucket& bucket, bool last) override;
  void all_added() override;
  bool in_place_allowed() const override { return false; }  // the gradients are staged anyway
  bool slots() const override { return false; }             // start() copies them into the input
  void zero_slot(ReducerBucket&, size_t, at::Tensor& grad) override { grad = at::Tensor(); }  // zeros in the input
  std::shared_ptr<Work> start(ReducerBucket& bucket, CommHook& hook) override;
  void all_waited() override;
  at::Tensor reduced_grad(const ReducerBucket& bucket, int64_t offset, int64_t length) const override;
  std::vector<at::Tensor> reduced_grads() const override { return grad_shards(); }
  at::Tensor grad_shard(const ReducerBucket& bucket, int64_t begin, int64_t end) const override {
    return own_[bucket.index].grad_shard.narrow(0, 0, end - begin);
  }
  int64_t reduce_scattered_bytes() const override;

 private:
  // Per bucket: this rank's reduced gradients; the reduce-scatter's input while it runs; its staging
  // ring (-1: reduce-scattered from the member's own gradient).
  struct Own {
    at::Tensor grad_shard;
    at::Tensor input;
    int ring = -1;
  };
  // A staging ring, with its memory and the buckets holding regions of it.
  struct Ring {
    std::shared_ptr<Communicator> comm;
    at::TensorOptions options;
    at::Tensor memory;
    std::unique_ptr<StagingRing> plan;
    std::deque<size_t> holders;  // buckets whose reduce-scatter reads a region, oldest first
  };
  // Waits for the oldest reduce-scatter holding a region of `ring` and gives it back.
  void wait_oldest(size_t ring);

  std::vector<Own> own_;
  std::vector<Ring> rings_;
  at::Tensor tail_;  // the control element and the contributors, and their allreduce
  std::shared_ptr<Work> tail_work_;
};

at::Tensor Stage2::add_bucket(ReducerBucket& bucket, bool last) {
  shard_params(bucket);
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
    const int64_t padded = bucket.shard * bucket.comm->size();
    const bool direct = members(bucket).size() == 1 && padded == bucket.elements && !shared_memory(*bucket.comm);
    if (direct || padded == 0) continue;
    const at::Tensor& first = ctx_.params[members(bucket).front()];
    const auto key = std::make_pair(bucket.comm.get(), group_of(first));
    auto [it, added] = index.emplace(key, static_cast<int>(rings_.size()));
    if (added) {
      rings_.emplace_back();
      rings_.back().comm = bucket.comm;
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
  const int64_t padded = bucket.shard * bucket.comm->size();
  at::NoGradGuard no_grad;
  if (own.ring < 0) {
    // One parameter whose size divides by W: its gradient is the input (a zero one when it has none).
    const at::Tensor& param = ctx_.params[ids.front()];
    own.input = param.grad().defined() ? param.grad().contiguous().view({-1}) : at::zeros({padded}, param.options());
  } else {
    Ring& ring = rings_[static_cast<size_t>(own.ring)];
    int64_t at;
    while ((at = ring.plan->take(padded)) < 0) wait_oldest(static_cast<size_t>(own.ring));
    ring.holders.push_back(bucket.index);
    own.input = ring.memory.narrow(0, at, padded);
    int64_t offset = 0;
    for (size_t i : ids) {
      at::Tensor slot = own.input.narrow(0, offset, ctx_.params[i].numel());
      const at::Tensor& grad = ctx_.params[i].grad();
      if (grad.defined()) slot.view(ctx_.params[i].sizes()).copy_(grad);
      else slot.zero_();
      offset += ctx_.params[i].numel();
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
  const int64_t begin = bucket.shard * bucket.comm->rank();
  XLAUNCH_ASSERT(offset >= begin && offset + length <= begin + bucket.shard, "a range inside this rank's shard");
  return own_[bucket.index].grad_shard.narrow(0, offset - begin, length);
}

int64_t Stage2::reduce_scattered_bytes() const {
  int64_t bytes = 0;
  for (const ReducerBucket& bucket : ctx_.buckets)
    bytes += bucket.shard * bucket.comm->size() * ctx_.params[members(bucket).front()].element_size();
  return bytes;
}

}  // namespace

std::unique_ptr<StageStrategy> make_zero_stage_2(StageContext ctx) { return std::make_unique<Stage2>(ctx); }

}  // namespace xlaunch
