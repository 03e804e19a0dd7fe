// What a ZeRO stage (ReducerOptions::zero_stage, docs/memory.md) does with the reducer's buckets,
// as one interface, with one implementation per stage in runtime/src/ddp/stages/ and one row per
// stage in the table of xlaunch/zero_stages.h (as the communication hooks: xlaunch/extend/comm_hook.h). The reducer
// (xlaunch/reducer.h) keeps the bucket plan, the hooks, the overlap with backward, the in-place
// reduction, the agreement and the join; it asks its stage:
//  1. Building, once: the plan's caps (alone_from_cap), whether the hook fits (check_hook); then per
//     bucket in order, on every rank alike, what memory it has (add_bucket: its buffer and the
//     gradients' slots in it, the flat parameters, where the control element lives), then
//     all_added().
//  2. Per synced backward: as each gradient is ready, whether it moves into its slot (slots());
//     for a parameter without a gradient, its zeros (zero_slot); as a bucket is complete, how it
//     travels (start); after every bucket's Work was waited for, all_waited().
//  3. What the optimizer step covers: the averaged gradients (reduced_grad, reduced_grads,
//     grad_shard) and what a synced backward reduce-scattered.
//  4. What is gathered after the step: gather_params() allgathers the updated shards.
//
// Stage 0 (the defaults below): every bucket is a flat buffer, allreduced, and the optimizer steps
// every parameter. Stage 1 (ShardedStage): the same allreduce, but the parameters of each bucket are
// flat too and each rank steps its shard of them, then allgathers. Stage 2: a bucket's gradients are
// reduce-scattered into this rank's shard instead, so no rank keeps the whole gradients.
//
// Stage 3 (stages/stage3.cpp): the parameters are sharded between uses too. Each bucket is a unit of
// the model (ddp/units.h cuts it): its add_bucket keeps only this rank's shard of the flat
// parameters; 5. gather_unit allgathers them whole before the unit's forward and again before its
// backward, and free_unit frees them after each; its start is stage 2's reduce-scatter, after which
// the unit is freed; the optimizer steps the shard (param_piece), and nothing is gathered after it.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "xlaunch/extend/comm_hook.h"
#include "xlaunch/reducer.h"
#include "xlaunch/zero_stages.h"

namespace xlaunch {

// One bucket of the reducer: index, buffer, views and comm as the hook sees them (GradBucket), and
// the reducer's bookkeeping.
struct ReducerBucket : GradBucket {
  std::shared_ptr<Work> work;
  size_t pending = 0;
  // The communicator reduces the members' gradients where they lie (shared memory): a gradient in
  // its pool is not copied into the bucket.
  bool zero_copy = false;
  bool alone = false;  // a world of one: its collectives complete at once
  // Parameter elements (without padding or the control element), each rank's shard of them
  // (ddp/zero_layout.h), and at stages that shard parameters the flat parameters, W * shard
  // elements, the members' parameters views into them.
  int64_t elements = 0;
  int64_t shard = 0;
  at::Tensor params;
};

// What a stage sees of its reducer: the reducer's own members, alive as long as the stage.
struct StageContext {
  const ReducerOptions& options;
  std::vector<at::Tensor>& params;               // the trainable parameters, in registration order
  const std::vector<std::vector<size_t>>& plan;  // per bucket, its members (indices into params)
  std::vector<ReducerBucket>& buckets;           // filled in order while the reducer is built
  // Hooks parameter i's gradient accumulator again (after a change of its dtype, which gives it a
  // new one).
  std::function<void(size_t)> rehook;
};

class StageStrategy {
 public:
  explicit StageStrategy(StageContext ctx) : ctx_(ctx) {}
  virtual ~StageStrategy() = default;
  // Its row of XLAUNCH_ZERO_STAGES (xlaunch/zero_stages.h).
  virtual int stage() const = 0;

  // 1. Building.
  // Whether every parameter of at least the bucket cap gets a bucket of its own (BucketCaps).
  virtual bool alone_from_cap() const { return false; }
  // Throws UsageError, naming the settings, when `hook` cannot carry this stage's buckets.
  virtual void check_hook(const CommHook& hook) const { (void)hook; }
  // Lays out the bucket's memory once its index, comm, elements and shard are set (collective: it
  // may allocate from bucket.comm). For the last bucket, returns the 1 + W elements that carry the
  // control element and the contributors (xlaunch/reducer.h). Default: one flat buffer from the
  // communicator, the members' gradients views into it (their slots), in order, then the 1 + W.
  virtual at::Tensor add_bucket(ReducerBucket& bucket, bool last);
  // After the last add_bucket (collective).
  virtual void all_added() {}
  // Whether a bucket's gradients may be reduced where autograd put them (ReducerBucket::zero_copy)
  // rather than in their slots. Default: yes.
  virtual bool in_place_allowed() const { return true; }

  // 2. Each synced backward.
  // Whether each gradient moves into its slot as it is ready (the reducer's place_grad). Without
  // slots, gradients stay where autograd put them until start() takes them. Default: slots.
  virtual bool slots() const { return true; }
  // The member at `pos` of `bucket` has no gradient to reduce (unused, or a joined rank): makes the
  // bucket reduce zeros for it; `grad` is its parameter's. Default: its slot, zeroed, is its gradient.
  virtual void zero_slot(ReducerBucket& bucket, size_t pos, at::Tensor& grad);
  // Starts reducing a complete bucket, in bucket order, under the reducer's lock, on the autograd
  // thread that completed it: it may wait for an earlier bucket's Work, never for other ranks to
  // start anything. Default: the hook averages it (CommHook::start).
  virtual std::shared_ptr<Work> start(ReducerBucket& bucket, CommHook& hook) { return hook.start(bucket); }
  // Once every bucket's Work was waited for.
  virtual void all_waited() {}

  // 3. What the optimizer step covers (Reducer::reduced_grad and the others there).
  // This rank's averaged gradients of bucket elements [offset, offset + length). Default: the bucket's.
  virtual at::Tensor reduced_grad(const ReducerBucket& bucket, int64_t offset, int64_t length) const;
  // Everything this rank holds of the averaged gradients. Default: the parameters' gradients.
  virtual std::vector<at::Tensor> reduced_grads() const;
  // Bucket elements [begin, end) of this rank's shard, averaged. Default: the bucket's.
  virtual at::Tensor grad_shard(const ReducerBucket& bucket, int64_t begin, int64_t end) const;
  // Per rank, the bytes a synced backward reduce-scatters. Default: none.
  virtual int64_t reduce_scattered_bytes() const { return 0; }
  // grad_shard() of every bucket where this rank's shard holds parameter elements.
  std::vector<at::Tensor> grad_shards() const;

  // 4. After the step.
  // Starts allgathering the bucket's updated shards into every rank's flat parameters, which a stage
  // that shards them made in add_bucket (ReducerBucket::params; none at stage 0: an internal error).
  virtual std::shared_ptr<Work> gather_params(ReducerBucket& bucket);
  // Where the optimizer's piece of bucket elements [offset, offset + length) lives. Default: the
  // flat parameters (ReducerBucket::params).
  virtual at::Tensor param_piece(const ReducerBucket& bucket, int64_t offset, int64_t length) const {
    return bucket.params.narrow(0, offset, length);
  }

  // 5. Units (stage 3; the defaults: every parameter is whole all the time).
  // Starts making the bucket's parameters whole (collective, in the same order on every rank);
  // they may be read after wait_unit. Nothing for a bucket already whole or on its way. exact: in
  // the parameters' own dtype, whatever the mixed-precision policy (fsdp.param_dtype) says.
  virtual void gather_unit(ReducerBucket& bucket, bool exact) {
    (void)bucket;
    (void)exact;
  }
  // Waits for the bucket's gather on its way, if any.
  virtual void wait_unit(ReducerBucket& bucket) { (void)bucket; }
  // Frees the bucket's whole parameters (waiting for a gather on its way first). keep_changes: this
  // rank's shard takes what the whole parameters hold first (after a broadcast or a load).
  virtual void free_unit(ReducerBucket& bucket, bool keep_changes) {
    (void)bucket;
    (void)keep_changes;
  }
  // The bytes per element a gather of the bucket moves. Default: the parameters' own.
  virtual int64_t gathered_element_size(const ReducerBucket& bucket) const {
    return static_cast<int64_t>(ctx_.params[members(bucket).front()].element_size());
  }
  // Whether the bucket's parameters are whole now (a gather on its way counts).
  virtual bool unit_whole(const ReducerBucket& bucket) const {
    (void)bucket;
    return true;
  }
  // After every backward, synced or not.
  virtual void backward_over() {}
  // What Reducer::layout() adds to the bucket's line. Default: nothing.
  virtual std::string describe(const ReducerBucket& bucket) const {
    (void)bucket;
    return "";
  }

 protected:
  const std::vector<size_t>& members(const ReducerBucket& bucket) const { return ctx_.plan[bucket.index]; }
  StageContext ctx_;
};

// A stage whose parameters are sharded: each bucket's parameters move into one flat buffer, padded
// to W * shard elements, each rank steps its shard, and the updated shards are allgathered.
class ShardedStage : public StageStrategy {
 public:
  using StageStrategy::StageStrategy;
  std::string describe(const ReducerBucket& bucket) const override;

 protected:
  // Moves the bucket's parameters into ReducerBucket::params (collective: allocated by the comm).
  void shard_params(ReducerBucket& bucket);
};

// A tensor over `buffer`'s memory from `offset`, shaped `sizes`. It shares the storage without being
// an autograd view of it, so optimizers may detach_() or reset gradients freely.
at::Tensor bucket_alias(const at::Tensor& buffer, int64_t offset, at::IntArrayRef sizes);
// A tensor's dtype and device, e.g. "float@cpu": the bucket plan's groups.
std::string group_of(const at::Tensor& t);

// One factory per row of XLAUNCH_ZERO_STAGES, each defined in runtime/src/ddp/stages/.
#define XLAUNCH_ZERO_STAGE_FACTORY(stage, name, meaning) \
  std::unique_ptr<StageStrategy> make_zero_stage_##stage(StageContext ctx);
XLAUNCH_ZERO_STAGES(XLAUNCH_ZERO_STAGE_FACTORY)
#undef XLAUNCH_ZERO_STAGE_FACTORY

// The strategy of ctx.options.zero_stage. Throws UsageError naming ddp.zero_stage and the stages
// there are when the table has no such row.
std::unique_ptr<StageStrategy> make_stage_strategy(StageContext ctx);

}  // namespace xlaunch
