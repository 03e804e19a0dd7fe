// The gradient reducer: data-parallel gradient averaging, overlapped with backward.
//
// The bucket-ready protocol, per synced backward:
//  1. prepare_for_backward() arms the reducer (sync or local accumulation); when synced, it writes
//     this rank's control bit into the last bucket (see Agreement below).
//  2. Autograd accumulates a parameter's gradient, then our post-hook on its AccumulateGrad node
//     runs: the gradient is made to live where the communicator can reduce it (see Memory below),
//     and the parameter is marked ready.
//  3. When every parameter of a bucket is ready, and every earlier bucket has been started, the
//     bucket's allreduce (average, through the communication hook) starts at once on the
//     communicator (MPI: its communication thread; NCCL: its stream) while backward keeps
//     computing. Buckets start in index order on every rank, so collectives match across ranks.
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
// Communication hooks (ReducerOptions::comm_hook, as PyTorch's DDP register_comm_hook) decide how
// each bucket travels: the table of them is xlaunch/comm_hooks.h, the interface
// xlaunch/extend/comm_hook.h. Under a hook other than none, gradients are always copied into their
// bucket first (a hook transforms the bucket as a whole).
//
// Agreement, without a collective of its own (to stop for preemption at the next optimizer step,
// say): the last bucket ends with one element that belongs to no parameter, the control element.
// Before each synced backward starts that bucket, every rank writes its control bit there (1 or 0),
// and the hook averages it with the gradients: the average is > 0 iff some rank's bit was set. It
// changes no gradient, bit for bit, and is no parameter anywhere (unused parameters, pending counts);
// layout() names it, the same on every rank.
//
// Uneven inputs (Accelerator::join, docs/data-loading.md): after the control element the last bucket
// holds one element per rank, written 1 at its own index by a rank that contributes gradients to
// the synced backward and 0 by a rank that has joined (its data ended). Averaged with the gradients,
// they say which ranks contributed (ddp/contributors.h). When fewer than all did, finalize_backward
// multiplies the averaged gradients by world / contributors: the average is over the ranks that
// contributed, as with PyTorch's Join. Only then: a backward every rank contributed to is unchanged.
// A joined rank runs join_backward() instead of a backward: the same collectives, with zeros.
//
// Sharded data parallelism (ZeRO, ReducerOptions::zero_stage >= 1; docs/memory.md): the parameters
// of each bucket move into one flat buffer, padded to a multiple of the world size W, and become
// views into it; rank r owns shard r of every bucket (ddp/zero_layout.h), which the prepared
// optimizer steps (ddp/zero_optimizer.h) before gather_params_async() allgathers the updated shards.
// What differs between the stages is one strategy per stage (ddp/stage_strategy.h, a table of them
// with a file each in runtime/src/ddp/stages/); the reducer asks it and never tests the stage.
//  - Stage 1: gradients are allreduced as above (always copied into their bucket: the optimizer
//    steps views of it); reduced_grad() is a view of the bucket.
//  - Stage 2: gradients are reduce-scattered, bucket by bucket as they become complete, into a
//    persistent shard of ceil(E / W) elements per bucket; then each member's gradient is released
//    (param.grad is undefined after a synced backward). A bucket of one parameter whose size divides
//    by W is reduce-scattered from where autograd put it (outside shared memory); the others are
//    copied into a staging ring (ddp/staging_ring.h) that holds the largest bucket and one more, so
//    the full gradients never exist all at once. The plan gives every parameter of at least
//    bucket_cap_mb a bucket of its own. The control element and the contributors travel in an
//    allreduce of their own (1 + W elements) beside the last bucket. Without sync (accumulation),
//    gradients accumulate in param.grad, whole, until the synced backward.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "xlaunch/env_vars.h"

namespace torch::autograd {
struct Node;
}

namespace xlaunch {

class CommHook;       // xlaunch/extend/comm_hook.h
class Communicator;   // xlaunch/extend/communicator.h
class ControlWord;
class Contributors;
class StageStrategy;  // ddp/stage_strategy.h, with ReducerBucket
struct ReducerBucket;
class Work;
class GradCapture;
class SharedPool;

// Tensors by name: a communication hook's state in checkpoints.
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// The defaults are the XLAUNCH_* variables' own (env_vars.h); from_env() of AcceleratorOptions
// takes the launched job's values instead.
struct ReducerOptions {
  double bucket_cap_mb = env::default_float(env::kBucketCapMb);
  int64_t first_bucket_bytes = 1 << 20;  // like PyTorch's DDP; no setting of its own
  bool find_unused_parameters = env::default_bool(env::kFindUnusedParameters);
  // How each bucket travels: the name of a hook in the table of xlaunch/comm_hooks.h.
  std::string comm_hook = env::default_string(env::kCommHook);
  // Rank of the approximation of each weight matrix.
  int powersgd_rank = static_cast<int>(env::default_int(env::kPowerSgdRank));
  // Synced backwards reduced exactly before PowerSGD starts.
  int64_t powersgd_start_step = env::default_int(env::kPowerSgdStartStep);
  // Sharded data parallelism (docs/memory.md): 0 none; 1 each rank's prepared optimizer steps only
  // its shard of every bucket, and the updated shards are allgathered; 2 the gradients are
  // reduce-scattered too, so a rank keeps only its shard of them.
  int zero_stage = static_cast<int>(env::default_int(env::kZeroStage));
  std::string shard_group = env::default_string(env::kShardGroup);
  // Stage 3 (the fsdp section): units gathered ahead of the one computing; whether a unit's
  // gathered parameters are freed after its forward (else kept until its backward); whether each
  // unit keeps only its inputs in forward and runs again in its backward (activation
  // checkpointing); which modules are units (the wrap policy, xlaunch/wrap_policy.h); and the dtype
  // units are gathered and computed in ("fp32", "bf16", "fp16": the mixed-precision policy).
  int fsdp_prefetch = static_cast<int>(env::default_int(env::kFsdpPrefetch));
  bool reshard_after_forward = env::default_bool(env::kFsdpReshardAfterForward);
  bool fsdp_activation_checkpointing = env::default_bool(env::kFsdpActivationCheckpointing);
  std::string fsdp_wrap = env::default_string(env::kFsdpWrap);
  std::string fsdp_param_dtype = env::default_string(env::kFsdpParamDtype);
};

// Which communicator reduces tensors on a device (MPI for CPU, NCCL for CUDA).
using CommunicatorForDevice = std::function<std::shared_ptr<Communicator>(const at::Device&)>;

class Reducer {
 public:
  // params: the trainable parameters in registration order, with their names (for messages).
  // units: at zero_stage 3, the buckets (indices into params, each parameter in one), as ddp/units.h
  // cuts the model; empty: the bucket plan's (bucket_cap_mb).
  Reducer(std::vector<at::Tensor> params, std::vector<std::string> names, CommunicatorForDevice comm_for,
          ReducerOptions options, std::vector<std::vector<size_t>> units = {});
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

  // The communication hook's state for checkpoints, empty when the hook keeps none; else
  // "sync_steps" and the hook's own entries (CommHook::state; PowerSGD's are listed in
  // docs/checkpointing.md). Live tensors.
  NamedTensors hook_state() const;
  // What this rank restores of `saved`, a hook_state() saved in a job of `saved_world` ranks (this
  // rank's own when that is `world`, else rank 0's), in this job of `world` ranks: "sync_steps" and
  // what the hook keeps (CommHook::state_for_world). `note`: what was left out, and why, or "".
  NamedTensors hook_state_for_world(NamedTensors saved, int saved_world, int world, std::string* note) const;
  // "" when `saved` (from hook_state_for_world) fits this reducer, else why not.
  std::string hook_state_mismatch(const NamedTensors& saved) const;
  // Restores it; what `saved` lacks restarts from its initial value.
  void load_hook_state(const NamedTensors& saved);
  // Synced backward passes so far (PowerSGD starts after powersgd_start_step of them).
  int64_t sync_steps() const { return sync_steps_; }

  // This rank's control bit for the synced backwards that follow, until changed (initially off).
  // Any thread. Backwards without sync (gradient accumulation) carry nothing: the bit travels with
  // the next synced one.
  void set_control_bit(bool on);
  // The sync_steps() count at which a raised control bit (of any rank) was first observed, or -1;
  // once set it stays. Every rank observes it at the same count, never before the synced backward
  // that carried it:
  //  - last bucket on the CPU: at the finalize_backward of that backward (a bit set while
  //    sync_steps() == s is observed as s + 1);
  //  - on a device: one synced backward later (s + 2). That finalize copies the average non_blocking
  //    into pinned memory behind an event; the next synced finalize waits for the event, by then a
  //    step old, so reading never stalls the host on the device.
  // A world of one observes its own bit. A model with no trainable parameters has no buckets: this
  // stays -1. With 16-bit gradients in the last bucket, or the fp16 hook, 1/W must stay a normal
  // 16-bit number: at most 2^14 processes (the reducer refuses more for a 16-bit last bucket).
  int64_t control_raised_at() const;

  // Uneven inputs (see above). The contributors are read on the host after every synced backward on
  // the CPU (free); on a device only while set_uneven(true) (a host wait for the last bucket per
  // synced backward), else every rank is taken to have contributed. Set it on every rank alike.
  void set_uneven(bool on) { uneven_ = on; }
  // A joined rank's synced backward, with no autograd: every bucket's collective is issued as an
  // active rank's backward issues them, carrying zeros and contributor 0, or, with contribute, the
  // gradients this rank accumulated without sync since its last synced backward (contributor 1).
  // Then as finalize_backward: the gradients hold the average over the contributing ranks.
  void join_backward(bool contribute);
  // Stage 3 with uneven inputs: a joined rank issues the allgathers and reduce-scatters of this
  // rank's last complete step again, in the order it issued them (every rank calls the units in the
  // same order, step after step). begin_step_script: a prepared model's forward begins, and its
  // step's collectives are recorded until its synced backward completes; has_step_script: one
  // step was recorded; replay_forward_script: a joined rank's gathers of the forward (each waited
  // for and freed at once); join_backward replays the backward's, between its bucket launches.
  // Nothing at other stages.
  void begin_step_script();
  bool has_step_script() const;
  void replay_forward_script();
  // Of the last synced backward: how many ranks contributed (the world size while nothing was read),
  // and the lowest of them in the last one any rank contributed to (0 at first).
  int contributors() const;
  int first_contributor() const;
  // Every rank contributes again (a new epoch): contributors() is the world size, first 0.
  void reset_contributors();

  // ZeRO (see above). The stage, and per bucket: its parameter elements E (without padding or the
  // control element), the elements of each rank's shard, and (stage >= 1) the flat parameters,
  // W * shard elements, the members' parameters views into them.
  int zero_stage() const { return options_.zero_stage; }
  int world() const { return world_; }
  int rank() const { return rank_; }
  // What the shards are cut over (ddp.shard_group): the job (world(), rank()), or at "machine" this
  // machine's ranks (its ranks per machine, this rank's local rank); the shard layout is
  // ddp/zero_layout.h's over shard_world(). replicas(): how many ranks hold each shard (1, or the
  // machines), replica(): which of them this rank is (its machine's place, in rank order).
  int shard_world() const { return shard_world_; }
  int shard_rank() const { return shard_rank_; }
  int replicas() const { return world_ / shard_world_; }
  int replica() const { return replica_; }
  // The communicator the shards are reduce-scattered and gathered over (GradBucket::shard_comm).
  const std::shared_ptr<Communicator>& shard_communicator() const;
  const std::vector<at::Tensor>& params() const { return params_; }
  const std::vector<std::string>& names() const { return names_; }
  // Each parameter's element count (at stage 3 a parameter is empty between its unit's uses).
  const std::vector<int64_t>& numels() const { return numels_; }
  int64_t bucket_elements(size_t b) const;
  int64_t bucket_shard(size_t b) const;
  const at::Tensor& bucket_params(size_t b) const;
  // This rank's averaged gradients of bucket b's elements [offset, offset + length), after a synced
  // backward: a view that stays valid (stage 1: of the bucket; stage 2: of this rank's shard, which
  // must hold the range).
  at::Tensor reduced_grad(size_t b, int64_t offset, int64_t length) const;
  // This rank's shard of every bucket's averaged gradients, parameter elements only (padding and
  // the control element left out): what a global norm sums over. Stage >= 1.
  std::vector<at::Tensor> grad_shards() const;
  // Everything this rank holds of the averaged gradients after a synced backward, to scale them
  // (normalisations): the parameters' gradients, or at stage 2 grad_shards().
  std::vector<at::Tensor> reduced_grads() const;
  // Allgathers bucket b's updated shards into every rank's flat parameters (stage 1 and 2; at stage
  // 3 the whole parameters are stale after a step, and freed).
  std::shared_ptr<Work> gather_params_async(size_t b);
  // The tensor the sharded optimizer steps for bucket b's elements [offset, offset + length) of
  // this rank's shard: a view of the flat parameters, or at stage 3 of the persistent shard.
  at::Tensor param_piece(size_t b, int64_t offset, int64_t length) const;
  // Stage 3's units (ddp/units.h): bucket b's parameters are whole from gather_unit (collective,
  // in the same order on every rank) and wait_unit until free_unit; keep_changes: this rank's shard
  // takes what they hold first. At other stages every parameter is always whole.
  // exact: in the parameters' own dtype whatever fsdp.param_dtype says (checkpoints, state dicts).
  void gather_unit(size_t b, bool exact = false);
  void wait_unit(size_t b);
  void free_unit(size_t b, bool keep_changes);
  bool unit_whole(size_t b) const;
  // The bytes per element a gather of bucket b moves: fsdp.param_dtype's at stage 3, else the
  // parameters' own.
  int64_t gathered_element_size(size_t b) const;
  // Bytes each synced backward reduce-scatters (stage 2: the padded buckets), per rank: for the
  // report (what the optimizers gather: ShardedOptimizer::gathered_bytes).
  int64_t reduce_scattered_bytes() const;

  // Tests and profiling: called (under the reducer's lock) as each bucket's allreduce is started.
  void set_launch_observer(std::function<void(size_t bucket)> fn) { on_launch_ = std::move(fn); }

 private:
  void on_grad_ready(size_t param);
  void launch_ready_buckets();
  void launch_next();  // the bucket at next_launch_, under mu_
  // Hooks parameter i's gradient accumulator (again: a change of dtype gives it a new one).
  void hook_param(size_t i);
  // Events [from, to) of the last step's script (see begin_step_script).
  void replay_script(size_t from, size_t to);
  void install_hooks();
  void reserve_pools();
  // Whether the bucket's communicator can reduce `grad` (of the member at `pos`) where it lies.
  bool in_place_ok(const ReducerBucket& bucket, size_t pos, const at::Tensor& grad) const;
  // Makes parameter i's gradient reducible where it is, or moves it into its bucket slot (at a stage
  // with slots).
  void place_grad(size_t i);
  // Parameter i is ready outside autograd (unused, or a joined rank's backward): with what it holds,
  // or, when `zeros`, with zeros.
  void ready_without_autograd(size_t i, bool zeros);
  // Starts what is left, waits for every bucket, reads the agreements; `unused` for the message.
  void complete_sync(const std::vector<size_t>& unused);

  std::vector<at::Tensor> params_;
  std::vector<std::string> names_;
  std::vector<int64_t> numels_;
  ReducerOptions options_;
  std::vector<std::vector<size_t>> plan_;
  std::vector<ReducerBucket> buckets_;
  std::unique_ptr<StageStrategy> stage_;  // over params_, plan_ and buckets_
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
  std::unique_ptr<CommHook> hook_;
  int64_t sync_steps_ = 0;
  std::unique_ptr<ControlWord> control_;  // over the last bucket's control element; null: no buckets
  std::unique_ptr<Contributors> contributors_;  // over the elements after it; null: no buckets
  bool contributing_ = true;  // what this rank writes into the contributors of a synced backward
  bool uneven_ = false;
  // Stage 3's step script (begin_step_script): the step being recorded, and the last complete one
  // with where its backward began. Under script_mu_ (taken after mu_, never before).
  struct ScriptEvent {
    bool gather;  // else a bucket's reduce-scatter
    size_t bucket;
  };
  mutable std::mutex script_mu_;
  bool scripting_ = false;
  std::vector<ScriptEvent> script_, last_script_;
  size_t script_backward_ = 0, last_backward_ = 0;
  int world_ = 1;
  int rank_ = 0;
  int shard_world_ = 1;
  int shard_rank_ = 0;
  int replica_ = 0;
  std::shared_ptr<Communicator> shard_comm_;
};

}  // namespace xlaunch
