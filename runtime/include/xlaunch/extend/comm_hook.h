// A communication hook: how the reducer averages one gradient bucket over the ranks (as c10d's
// CommHookInterface with its GradBucket). The hooks there are, and their names, are the table in
// xlaunch/comm_hooks.h; each is implemented in a file of runtime/src/ddp/hooks/ that defines
// make_comm_hook_<name>. The reducer (xlaunch/reducer.h) makes one hook per prepared
// model and calls it as follows, on every rank in the same order:
//  1. add_bucket() once per bucket, in bucket order, while the reducer is built.
//  2. Per synced backward: begin_step(); start() per bucket as its gradients become complete,
//     during backward, in bucket order; all_started() once every bucket has started; then each
//     bucket's Work is waited for, in bucket order; the gradients then hold their average.
//  3. For checkpoints: state(), state_for_world(), state_mismatch(), load_state().
// At ZeRO stage 2 (reducer.h) start_reduce_scatter() replaces start(): `buffer` is then the bucket's
// input of that step (its gradients, padded with zeros to S * shard elements, S the size of
// bucket.shard_comm: W, or with ddp.shard_group machine the ranks of a machine), `views` is empty,
// and the control element travels apart.
// Backward passes without sync (gradient accumulation) call none of these.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "xlaunch/comm_hooks.h"
#include "xlaunch/extend/communicator.h"
#include "xlaunch/reducer.h"

namespace xlaunch {

// One gradient bucket as a hook sees it. The same buckets (sizes, dtypes, order) on every rank.
struct GradBucket {
  size_t index = 0;               // its place in the bucket plan
  at::Tensor buffer;              // flat and contiguous, one dtype and device: the members in order
  // Per member, over `buffer`, shaped like its parameter. The last bucket ends with the reducer's
  // control element and one contributor element per rank (xlaunch/reducer.h): one more 1-dimensional
  // entry of 1 + world elements, belonging to no parameter, last in `buffer` too; hooks average it
  // like any gradient.
  std::vector<at::Tensor> views;
  std::shared_ptr<Communicator> comm;
  // What a reduce-scatter of the bucket runs over (start_reduce_scatter): `comm`, or with
  // ddp.shard_group machine this machine's ranks, whose reduce-scatter also sums each chunk over the
  // other machines' ranks of the same local rank (their replicas). Its size() is the shard count.
  std::shared_ptr<Communicator> shard_comm;
  // Empty unless the reducer left this step's gradients where autograd put them (only for a hook
  // whose reduces_in_place() is true, over shared memory): then one tensor per entry of `views`
  // (the gradients, which `buffer` does not hold, and the control element's view).
  std::vector<at::Tensor> in_place;
};

class CommHook {
 public:
  virtual ~CommHook() = default;

  // Whether the hook reduces tensors where they lie (GradBucket::in_place), so that the reducer
  // may skip copying gradients into their bucket. Default: the gradients are always in `buffer`.
  virtual bool reduces_in_place() const { return false; }
  // Once per bucket, in bucket order on every rank, as the reducer is built. Collective: the hook
  // may allocate from bucket.comm. The bucket (its buffer and views) outlives the hook.
  virtual void add_bucket(const GradBucket& bucket) { (void)bucket; }
  // Before the first bucket of a synced backward starts; `sync_steps` synced backwards came before.
  virtual void begin_step(int64_t sync_steps) { (void)sync_steps; }
  // Starts averaging the bucket's gradients over the ranks; called during backward (under the
  // reducer's lock, on whichever autograd thread completed the bucket), so it must not block on
  // other ranks. The returned Work's wait() leaves the average (or the hook's approximation of it,
  // the same on every rank) in the gradients.
  virtual std::shared_ptr<Work> start(const GradBucket& bucket) = 0;
  // Once every bucket of the step has started, before any Work is waited for: a second round that
  // all buckets should send together goes here.
  virtual void all_started() {}
  // ZeRO stage 2: "" when the hook can reduce-scatter, else why not (the reducer refuses the pair,
  // quoting it). Default: it cannot (a hook that transforms buckets in start() would be bypassed);
  // a hook that overrides start_reduce_scatter(), or whose plain average is right, returns "".
  virtual std::string reduce_scatter_refusal() const {
    return "this hook defines how buckets are allreduced (start), not how they are reduce-scattered "
           "(start_reduce_scatter)";
  }
  // ZeRO stage 2: starts reduce-scattering bucket.buffer (shard_comm->size() * out.numel() elements)
  // over bucket.shard_comm so that, once the Work is waited for, `out` holds this rank's chunk of
  // the average over every rank of the job (shard_comm's reduce-scatter with Avg sums over the
  // replicas too, and divides by the job's size). Called like start(). Default: exactly that.
  virtual std::shared_ptr<Work> start_reduce_scatter(const GradBucket& bucket, at::Tensor out);

  // The state a resumed run needs (checkpoints), as named tensors: the live ones, copy before
  // changing them. Empty (the default) when the hook keeps none. May differ between ranks.
  virtual NamedTensors state() const { return {}; }
  // What this rank restores of `saved`, a state() saved in a job of `saved_world` ranks, in this
  // job of `world` ranks: this rank's own state when the worlds are the same, else rank 0's (what
  // belongs to one rank's shard means nothing in another world). `note` is set to what was left
  // out and why, for the log ("" when nothing). Default: all of `saved` when the worlds are the
  // same, else nothing.
  virtual NamedTensors state_for_world(NamedTensors saved, int saved_world, int world, std::string* note) const;
  // "" when `saved` (from state_for_world) fits this hook and these buckets, else why not.
  virtual std::string state_mismatch(const NamedTensors& saved) const;
  // Restores what state_mismatch accepted; what `saved` lacks restarts from its initial value.
  virtual void load_state(const NamedTensors& saved) { (void)saved; }
};

// One factory per row of XLAUNCH_COMM_HOOKS, each defined in runtime/src/ddp/hooks/. A factory
// checks the options it reads (throwing UsageError naming the ddp.* key) and makes no collective.
#define XLAUNCH_COMM_HOOK_FACTORY(name, meaning) \
  std::unique_ptr<CommHook> make_comm_hook_##name(const ReducerOptions& options);
XLAUNCH_COMM_HOOKS(XLAUNCH_COMM_HOOK_FACTORY)
#undef XLAUNCH_COMM_HOOK_FACTORY

// The hook named options.comm_hook. Throws UsageError naming ddp.comm_hook and the names there are
// when the table has no such row.
std::unique_ptr<CommHook> make_comm_hook(const ReducerOptions& options);

}  // namespace xlaunch
