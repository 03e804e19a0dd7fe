// zero_stage 2 (xlaunch/reducer.h): each bucket's gradients are reduce-scattered, as the bucket
// becomes complete, into this rank's persistent shard, from the gradient itself (one parameter whose
// size divides by W, outside shared memory) or from a staging ring (ddp/staging_ring.h); then the
// members' gradients are released. The control element and the contributors travel in an
// allreduce of their own beside the last bucket. The parameters are sharded as at stage 1; stage 3
// (stage3.cpp) keeps only this rank's shard of them between uses.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "ddp/stage_strategy.h"
#include "ddp/staging_ring.h"
#include "xlaunch/error.h"
#include "xlaunch/extend/communicator.h"

namespace xlaunch {

class Stage2 : public ShardedStage {
 public:
  using ShardedStage::ShardedStage;
  int stage() const override { return 2; }
  bool alone_from_cap() const override { return true; }
  void check_hook(const CommHook& hook) const override {
    const std::string why = hook.reduce_scatter_refusal();
    if (!why.empty())
      throw UsageError("ddp.comm_hook " + ctx_.options.comm_hook + " cannot be used with ddp.zero_stage " +
                       std::to_string(stage()) + ": " + why + ". Use zero_stage 1 with it, or comm_hook none, fp16 " +
                       "or bf16 with stage " + std::to_string(stage()));
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

 protected:
  // Where the bucket's parameters live: stage 2 moves them into ReducerBucket::params.
  virtual void place_params(ReducerBucket& bucket) { shard_params(bucket); }
  // Each parameter's shape, from add_bucket on (at stage 3 a free parameter is empty).
  std::vector<std::vector<int64_t>> sizes_;
  int64_t numel_of(size_t param) const;

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

}  // namespace xlaunch
