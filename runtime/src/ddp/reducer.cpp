#include "xlaunch/reducer.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <c10/util/strides.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <deque>
#include <map>
#include <sstream>

#include "profile/step_clock.h"
#include "check.h"
#include "comm/shared_memory.h"
#include "ddp/accumulation.h"
#include "ddp/bucket_plan.h"
#include "ddp/contributors.h"
#include "ddp/control_word.h"
#include "watch/watchdog.h"
#include "xlaunch/error.h"
#include "ddp/grad_capture.h"
#include "ddp/staging_ring.h"
#include "ddp/zero_layout.h"
#include "xlaunch/extend/comm_hook.h"

namespace xlaunch {

// index, buffer, views and comm as the hook sees them (GradBucket), and the reducer's bookkeeping.
struct Reducer::Bucket : GradBucket {
  std::shared_ptr<Work> work;
  size_t pending = 0;
  // The communicator reduces the members' gradients where they lie (shared memory): a gradient in
  // its pool is not copied into the bucket.
  bool zero_copy = false;
  bool alone = false;  // a world of one: its collectives complete at once
  // ZeRO (reducer.h): parameter elements, each rank's shard of them, the flat parameters.
  int64_t elements = 0;
  int64_t shard = 0;
  at::Tensor params;
  // Stage 2: this rank's reduced gradients; the reduce-scatter's input while it runs; its staging
  // ring (-1: reduce-scattered from the member's own gradient).
  at::Tensor grad_shard;
  at::Tensor rs_input;
  int ring = -1;
};

struct Reducer::Ring {
  std::shared_ptr<Communicator> comm;
  at::TensorOptions options;
  at::Tensor memory;
  std::unique_ptr<StagingRing> plan;
  std::deque<size_t> holders;  // buckets whose reduce-scatter reads a region, oldest first
};

namespace {
// A tensor over the bucket's memory, shaped `sizes` (a parameter's). It shares the bucket's storage
// without being an autograd view of it, so optimizers may detach_() or reset gradients freely.
at::Tensor bucket_alias(const at::Tensor& buffer, int64_t offset, at::IntArrayRef sizes) {
  at::NoGradGuard no_grad;
  at::Tensor t = at::empty({0}, buffer.options());
  t.set_(buffer.storage(), buffer.storage_offset() + offset, sizes, c10::contiguous_strides(sizes));
  return t;
}

std::string group_of(const at::Tensor& p) {
  return std::string(at::toString(p.scalar_type())) + "@" + p.device().str();
}

// The control word over the last bucket's control element (views.back()).
std::unique_ptr<ControlWord> make_control(const GradBucket& bucket) {
  // Ranks that raised their bit are averaged into k/W: in 16 bits 1/W is still a normal number, not
  // rounded to zero, for W <= 2^14.
  const bool sixteen_bit = bucket.buffer.element_size() == 2;
  if (sixteen_bit && bucket.comm->size() > (1 << 14))
    throw UsageError("the gradients of this model are 16-bit (" + group_of(bucket.buffer) + ") and the job has " +
                     std::to_string(bucket.comm->size()) + " processes: the reducer's agreement across ranks " +
                     "needs 1/processes to be a normal 16-bit number (at most 16384 processes); train with " +
                     "float32 parameters (mixed_precision keeps 16-bit compute) or fewer processes");
  return std::make_unique<ControlWord>(bucket.views.back().narrow(0, 0, 1), /*deferred=*/!bucket.buffer.is_cpu());
}
}  // namespace

Reducer::Reducer(std::vector<at::Tensor> params, std::vector<std::string> names, CommunicatorForDevice comm_for,
                 ReducerOptions options)
    : params_(std::move(params)), names_(std::move(names)), options_(options) {
  XLAUNCH_ASSERT(params_.size() == names_.size(), "one name per parameter");
  if (options_.bucket_cap_mb <= 0)
    throw UsageError("bucket_cap_mb must be positive (got " + std::to_string(options_.bucket_cap_mb) +
                     "); set ddp.bucket_cap_mb in the config, e.g. 25");
  std::vector<BucketParam> sizes;
  for (const auto& p : params_) sizes.push_back({p.numel() * static_cast<int64_t>(p.element_size()), group_of(p)});
  if (options_.zero_stage < 0 || options_.zero_stage > 2)
    throw UsageError("zero_stage " + std::to_string(options_.zero_stage) + " is not built: set ddp.zero_stage to 0 "
                     "(no sharding), 1 (optimizer state sharded) or 2 (optimizer state and gradients sharded)");
  BucketCaps caps;
  caps.cap_bytes = static_cast<int64_t>(options_.bucket_cap_mb * 1024 * 1024);
  caps.first_cap_bytes = std::min(options_.first_bucket_bytes, caps.cap_bytes);
  caps.alone_from_cap = options_.zero_stage == 2;
  plan_ = assign_buckets(sizes, caps);
  hook_ = make_comm_hook(options_);
  if (options_.zero_stage == 2) {
    const std::string why = hook_->reduce_scatter_refusal();
    if (!why.empty())
      throw UsageError("ddp.comm_hook " + options_.comm_hook + " cannot be used with ddp.zero_stage 2: " + why +
                       ". Use zero_stage 1 with it, or comm_hook none, fp16 or bf16 with stage 2");
  }

  buckets_.resize(plan_.size());
  slot_of_.resize(params_.size());
  ready_.assign(params_.size(), 0);
  for (size_t b = 0; b < plan_.size(); ++b) {
    Bucket& bucket = buckets_[b];
    bucket.index = b;
    const at::Tensor& first = params_[plan_[b].front()];
    const bool last = b + 1 == plan_.size();
    int64_t total = 0;
    for (size_t i : plan_[b]) total += params_[i].numel();
    bucket.comm = comm_for(first.device());
    world_ = bucket.comm->size();
    rank_ = bucket.comm->rank();
    bucket.elements = total;
    bucket.shard = zero::shard_elements(total, world_);
    if (options_.zero_stage >= 1) flatten_params(bucket, plan_[b]);
    if (options_.zero_stage == 2) {
      for (size_t pos = 0; pos < plan_[b].size(); ++pos) slot_of_[plan_[b][pos]] = {b, pos};
      bucket.grad_shard = at::zeros({bucket.shard}, first.options().requires_grad(false));
      if (last) {
        // The control element and the contributors, in an allreduce of their own beside the last
        // bucket's reduce-scatter (which leaves each rank only its shard).
        tail_ = bucket.comm->allocate(1 + world_, first.options().requires_grad(false));
        GradBucket tail_bucket;
        tail_bucket.buffer = tail_;
        tail_bucket.views = {tail_};
        tail_bucket.comm = bucket.comm;
        control_ = make_control(tail_bucket);
        contributors_ = std::make_unique<Contributors>(tail_.narrow(0, 1, world_), rank_);
      }
      bucket.alone = world_ == 1;
      hook_->add_bucket(bucket);
      continue;
    }
    // The last bucket's tail: the control element, then one contributor element per rank.
    const int64_t tail = last ? 1 + bucket.comm->size() : 0;
    bucket.buffer = bucket.comm->allocate(total + tail, first.options().requires_grad(false));
    int64_t offset = 0;
    for (size_t pos = 0; pos < plan_[b].size(); ++pos) {
      const size_t i = plan_[b][pos];
      bucket.views.push_back(bucket_alias(bucket.buffer, offset, params_[i].sizes()));
      offset += params_[i].numel();
      slot_of_[i] = {b, pos};
    }
    if (last) {
      // The tail after every gradient, so the members' offsets are as without it: one entry of
      // `views` for the hooks, over the control element and the contributors.
      bucket.views.push_back(bucket_alias(bucket.buffer, total, {tail}));
      control_ = make_control(bucket);
      contributors_ = std::make_unique<Contributors>(bucket.views.back().narrow(0, 1, tail - 1), bucket.comm->rank());
    }
    // Gradients live in the bucket from the start; an existing gradient is kept.
    for (size_t pos = 0; pos < plan_[b].size(); ++pos) {
      at::Tensor& grad = params_[plan_[b][pos]].mutable_grad();
      if (grad.defined()) bucket.views[pos].copy_(grad);
      grad = bucket.views[pos];
    }
    // Reduced where the gradients lie: over shared memory the others read them there; in a world
    // of one the average is the gradient itself, so copying it into the bucket would be a pass
    // over every gradient for nothing (3% of a large MLP's step on an H200).
    SharedMemoryTransport* shm = shared_memory(*bucket.comm);
    bucket.alone = bucket.comm->size() == 1;
    // Stage 1's optimizer steps views of the bucket: the gradients must be there.
    bucket.zero_copy = options_.zero_stage == 0 && hook_->reduces_in_place() &&
                       (bucket.alone || (shm && shm->holds(bucket.buffer)));
    hook_->add_bucket(bucket);
  }
  if (options_.zero_stage == 2) make_rings();
  reserve_pools();
  install_hooks();
}

void Reducer::flatten_params(Bucket& bucket, const std::vector<size_t>& members) {
  const at::Tensor& first = params_[members.front()];
  // Allocated by the communicator: over shared memory the allgather copies the shards where they lie.
  bucket.params = bucket.comm->allocate(bucket.shard * world_, first.options().requires_grad(false));
  at::NoGradGuard no_grad;
  int64_t offset = 0;
  for (size_t i : members) {
    at::Tensor view = bucket_alias(bucket.params, offset, params_[i].sizes());
    view.copy_(params_[i]);
    // The parameter keeps its identity (the optimizer and the module hold it), now over the flat buffer.
    params_[i].set_data(view);
    offset += params_[i].numel();
  }
  bucket.params.narrow(0, offset, bucket.params.numel() - offset).zero_();
}

void Reducer::make_rings() {
  // A bucket of one parameter whose size divides by W is reduce-scattered from the gradient itself,
  // except over shared memory, which reduces only its own memory. The others share a ring per
  // communicator and dtype, holding the largest of them and one more bucket: the next bucket's
  // gradients are copied while the one before is still being reduced.
  std::map<std::pair<Communicator*, std::string>, int> index;
  std::vector<int64_t> largest, total;
  const int64_t cap_elements = static_cast<int64_t>(options_.bucket_cap_mb * 1024 * 1024);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    Bucket& bucket = buckets_[b];
    const int64_t padded = bucket.shard * world_;
    const bool direct = plan_[b].size() == 1 && padded == bucket.elements && !shared_memory(*bucket.comm);
    if (direct || padded == 0) continue;
    const at::Tensor& first = params_[plan_[b].front()];
    const auto key = std::make_pair(bucket.comm.get(), group_of(first));
    auto [it, added] = index.emplace(key, static_cast<int>(rings_.size()));
    if (added) {
      rings_.emplace_back();
      rings_.back().comm = bucket.comm;
      rings_.back().options = first.options().requires_grad(false);
      largest.push_back(0);
      total.push_back(0);
    }
    bucket.ring = it->second;
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

void Reducer::reserve_pools() {
  // One pool per communicator that reduces in place, sized for its buckets' gradients plus room
  // for autograd's gradient-sized temporaries. Collective: every rank walks the same buckets.
  std::vector<std::shared_ptr<Communicator>> comms;
  for (const auto& bucket : buckets_)
    if (bucket.zero_copy && !bucket.alone && std::find(comms.begin(), comms.end(), bucket.comm) == comms.end())
      comms.push_back(bucket.comm);
  for (const auto& comm : comms) {
    size_t bytes = 0;
    std::vector<size_t> sizes;
    for (size_t b = 0; b < buckets_.size(); ++b) {
      if (buckets_[b].comm != comm) continue;
      bytes += buckets_[b].buffer.nbytes();
      for (size_t i : plan_[b])
        if (params_[i].numel() > 0) sizes.push_back(params_[i].nbytes());
    }
    SharedPool* pool = shared_memory(*comm)->reserve_pool(bytes + bytes / 4 + (size_t{1} << 20));
    if (!pool) continue;
    pools_.push_back(pool);
    capture_sizes_.insert(capture_sizes_.end(), sizes.begin(), sizes.end());
  }
}

bool Reducer::in_place_ok(const Bucket& bucket, size_t pos, const at::Tensor& grad) const {
  if (grad.is_same(bucket.views[pos])) return true;
  if (!bucket.zero_copy) return false;
  if (bucket.alone) return grad.layout() == at::kStrided;  // nobody else reads it
  if (!shared_memory(*bucket.comm)->holds(grad)) return false;
  // Not inside any bucket: another parameter's slot is no place for this gradient.
  const char* p = static_cast<const char*>(grad.data_ptr());
  for (const auto& other : buckets_) {
    const char* base = static_cast<const char*>(other.buffer.data_ptr());
    if (p + grad.nbytes() > base && p < base + other.buffer.nbytes()) return false;
  }
  return true;
}

void Reducer::set_control_bit(bool on) {
  if (control_) control_->set_bit(on);
}

int64_t Reducer::control_raised_at() const { return control_ ? control_->raised_at() : -1; }

int Reducer::contributors() const { return contributors_ ? contributors_->count() : 0; }
int Reducer::first_contributor() const { return contributors_ ? contributors_->first() : 0; }
void Reducer::reset_contributors() {
  if (contributors_) contributors_->reset();
}

Reducer::~Reducer() {
  for (size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(hook_keys_[i]);
}

void Reducer::install_hooks() {
  for (size_t i = 0; i < params_.size(); ++i) {
    // The AccumulateGrad node is held weakly by the parameter; keep it alive with our hook on it.
    auto acc = torch::autograd::impl::grad_accumulator(params_[i]);
    XLAUNCH_ASSERT(acc != nullptr, "trainable parameters have a gradient accumulator");
    auto hook = std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, i](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          on_grad_ready(i);
          return outputs;
        });
    hook_keys_.push_back(acc->add_post_hook(std::move(hook)));
    accumulators_.push_back(std::move(acc));
  }
}

void Reducer::prepare_for_backward(bool sync) {
  std::lock_guard<std::mutex> lk(mu_);
  XLAUNCH_ASSERT(!armed_, "prepare_for_backward twice without finalize_backward");
  armed_ = true;
  sync_ = sync;
  next_launch_ = 0;
  if (sync_) {
    hook_->begin_step(sync_steps_);
    if (control_) control_->write();
    if (contributors_) contributors_->write(contributing_);
  }
  std::fill(ready_.begin(), ready_.end(), 0);
  for (size_t b = 0; b < buckets_.size(); ++b) buckets_[b].pending = plan_[b].size();
  // Fresh gradients of this backward are allocated in the shared pool (see grad_capture.h).
  if (!capture_sizes_.empty()) capture_ = std::make_unique<GradCapture>(capture_sizes_, pools_);
}

void Reducer::on_grad_ready(size_t i) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!armed_)
    throw UsageError("parameter '" + names_[i] + "' of a prepared model received a gradient outside " +
                     "acc.backward(loss): call acc.backward(loss) instead of loss.backward(), so its " +
                     "gradient is averaged across ranks");
  if (!sync_) return;  // local accumulation: the gradient stays where autograd put it
  const auto [b, pos] = slot_of_[i];
  Bucket& bucket = buckets_[b];
  if (ready_[i])
    throw UsageError("parameter '" + names_[i] + "' received its gradient twice in one backward " +
                     "(backward through the same graph twice, or a reentrant backward); " +
                     "run one backward per step through acc.backward(loss)");
  if (options_.zero_stage < 2) place_grad(i);  // stage 2 copies the bucket's gradients as it starts
  ready_[i] = 1;
  if (--bucket.pending == 0) launch_ready_buckets();
}

void Reducer::place_grad(size_t i) {
  const auto [b, pos] = slot_of_[i];
  Bucket& bucket = buckets_[b];
  at::Tensor& grad = params_[i].mutable_grad();
  if (!in_place_ok(bucket, pos, grad)) {
    // A gradient the communicator cannot reach where it is (autograd made it outside the shared
    // pool, or there is none): move it into the bucket.
    bucket.views[pos].copy_(grad);
    grad = bucket.views[pos];
  }
}

void Reducer::launch_ready_buckets() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    Bucket& bucket = buckets_[next_launch_];
    const watch::BucketScope logged_as(static_cast<int>(next_launch_));
    if (bucket.zero_copy) {
      for (size_t i : plan_[next_launch_]) bucket.in_place.push_back(params_[i].grad());
      if (bucket.views.size() > plan_[next_launch_].size()) bucket.in_place.push_back(bucket.views.back());
    }
    if (options_.zero_stage == 2) start_reduce_scatter(bucket);
    else bucket.work = hook_->start(bucket);
    bucket.in_place.clear();
    if (on_launch_) on_launch_(next_launch_);
    ++next_launch_;
    if (tail_.defined() && next_launch_ == buckets_.size()) tail_work_ = bucket.comm->allreduce_async(tail_, ReduceOp::Avg);
  }
}

void Reducer::start_reduce_scatter(Bucket& bucket) {
  const std::vector<size_t>& members = plan_[bucket.index];
  const int64_t padded = bucket.shard * world_;
  at::NoGradGuard no_grad;
  if (bucket.ring < 0) {
    // One parameter whose size divides by W: its gradient is the input (a zero one when it has none).
    const at::Tensor& grad = params_[members.front()].grad();
    bucket.rs_input = grad.defined() ? grad.contiguous().view({-1}) : at::zeros({padded}, params_[members.front()].options());
  } else {
    Ring& ring = rings_[static_cast<size_t>(bucket.ring)];
    int64_t at;
    while ((at = ring.plan->take(padded)) < 0) wait_oldest(static_cast<size_t>(bucket.ring));
    ring.holders.push_back(bucket.index);
    bucket.rs_input = ring.memory.narrow(0, at, padded);
    int64_t offset = 0;
    for (size_t i : members) {
      at::Tensor slot = bucket.rs_input.narrow(0, offset, params_[i].numel());
      const at::Tensor& grad = params_[i].grad();
      if (grad.defined()) slot.view(params_[i].sizes()).copy_(grad);
      else slot.zero_();
      offset += params_[i].numel();
    }
    bucket.rs_input.narrow(0, offset, padded - offset).zero_();
  }
  // The shard is what this rank keeps; the whole gradients go (the input holds what the
  // reduce-scatter still reads).
  for (size_t i : members) params_[i].mutable_grad() = at::Tensor();
  bucket.buffer = bucket.rs_input;
  bucket.work = hook_->start_reduce_scatter(bucket, bucket.grad_shard);
}

void Reducer::wait_oldest(size_t ring_index) {
  Ring& ring = rings_[ring_index];
  XLAUNCH_ASSERT(!ring.holders.empty(), "a ring bucket larger than its ring");
  Bucket& oldest = buckets_[ring.holders.front()];
  ring.holders.pop_front();
  if (oldest.work) {
    oldest.work->wait();
    oldest.work.reset();
  }
  oldest.rs_input = at::Tensor();
  oldest.buffer = at::Tensor();
  ring.plan->give_back_oldest();
}

void Reducer::finalize_backward() {
  capture_.reset();  // backward is over: allocations go to the CPU allocator again
  std::vector<size_t> unused;
  {
    std::lock_guard<std::mutex> lk(mu_);
    XLAUNCH_ASSERT(armed_, "finalize_backward without prepare_for_backward");
    armed_ = false;
    if (!sync_) return;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (ready_[i]) continue;
      unused.push_back(i);
      // Reduced as zeros: every rank still issues every bucket's collective, in order.
      const auto [b, pos] = slot_of_[i];
      at::Tensor& grad = params_[i].mutable_grad();
      if (options_.zero_stage == 2) {
        grad = at::Tensor();  // zeros in the staged input
      } else {
        buckets_[b].views[pos].zero_();
        grad = buckets_[b].views[pos];
      }
      ready_[i] = 1;
      --buckets_[b].pending;
    }
  }
  complete_sync(unused);
}

void Reducer::join_backward(bool contribute) {
  contributing_ = contribute;
  prepare_for_backward(/*sync=*/true);
  contributing_ = true;
  std::vector<size_t> none;
  {
    std::lock_guard<std::mutex> lk(mu_);
    armed_ = false;
    // No autograd: every parameter is ready with what it holds, or with zeros, and the buckets
    // start in order as in any synced backward.
    for (size_t i = 0; i < params_.size(); ++i) {
      const auto [b, pos] = slot_of_[i];
      at::Tensor& grad = params_[i].mutable_grad();
      if (contribute && grad.defined()) {
        if (options_.zero_stage < 2) place_grad(i);
      } else if (options_.zero_stage == 2) {
        grad = at::Tensor();  // zeros in the staged input
      } else {
        buckets_[b].views[pos].zero_();
        grad = buckets_[b].views[pos];
      }
      ready_[i] = 1;
      --buckets_[b].pending;
    }
  }
  capture_.reset();
  complete_sync(none);
}

void Reducer::complete_sync(const std::vector<size_t>& unused) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    launch_ready_buckets();
    XLAUNCH_ASSERT(next_launch_ == buckets_.size(), "every bucket started");
  }
  {
    const profile::PhaseScope phase(profile::kCommWait);  // what the overlap with backward did not hide
    hook_->all_started();
    for (auto& bucket : buckets_) {
      if (bucket.work) bucket.work->wait();  // stage 2: a ring may have waited for it already
      bucket.work.reset();
      if (options_.zero_stage == 2) {
        // The whole gradients go with the input (which may be a member's own gradient).
        bucket.rs_input = at::Tensor();
        bucket.buffer = at::Tensor();
      }
    }
    for (auto& ring : rings_)
      while (!ring.holders.empty()) {
        ring.holders.pop_front();
        ring.plan->give_back_oldest();
      }
    if (tail_work_) {
      tail_work_->wait();
      tail_work_.reset();
    }
  }
  ++sync_steps_;
  if (control_) control_->read(sync_steps_);
  if (contributors_ && (uneven_ || params_.front().is_cpu())) {
    contributors_->read();
    const int c = contributors_->count(), w = contributors_->world();
    // The hook divided the sum by every rank; only c of them put anything in it.
    if (c > 0 && c < w) {
      at::NoGradGuard no_grad;
      scale_gradients(reduced_grads(), static_cast<double>(w) / c);
    }
  }
  if (unused.empty() || options_.find_unused_parameters) return;
  std::ostringstream os;
  os << "on " << where_am_i() << ", " << unused.size() << " parameter(s) of the prepared model did not "
     << "receive a gradient in this backward: ";
  for (size_t k = 0; k < unused.size() && k < 10; ++k) os << (k ? ", " : "") << "'" << names_[unused[k]] << "'";
  if (unused.size() > 10) os << ", ... (" << unused.size() - 10 << " more)";
  os << ". Every trainable parameter must take part in computing the loss on every step. If some "
        "are legitimately unused (conditional branches, an unused head), set "
        "`ddp: {find_unused_parameters: true}` in the config (XLAUNCH_FIND_UNUSED_PARAMETERS=1) and "
        "they are reduced as zeros; parameters that should not train at all: call "
        "requires_grad_(false) on them before acc.prepare.";
  throw UsageError(os.str());
}

NamedTensors Reducer::hook_state() const {
  NamedTensors out = hook_->state();
  if (!out.empty()) out.emplace(out.begin(), "sync_steps", at::full({}, sync_steps_, at::kLong));
  return out;
}

namespace {
// saved without its "sync_steps" (the reducer's), and that entry, when there is one.
NamedTensors hook_entries(const NamedTensors& saved, at::Tensor* sync_steps = nullptr) {
  NamedTensors out;
  for (const auto& [name, t] : saved) {
    if (name != "sync_steps") out.emplace_back(name, t);
    else if (sync_steps) *sync_steps = t;
  }
  return out;
}
}  // namespace

NamedTensors Reducer::hook_state_for_world(NamedTensors saved, int saved_world, int world, std::string* note) const {
  at::Tensor steps;
  NamedTensors out = hook_->state_for_world(hook_entries(saved, &steps), saved_world, world, note);
  if (steps.defined()) out.emplace(out.begin(), "sync_steps", steps);
  return out;
}

std::string Reducer::hook_state_mismatch(const NamedTensors& saved) const {
  return hook_->state_mismatch(hook_entries(saved));
}

void Reducer::load_hook_state(const NamedTensors& saved) {
  at::Tensor steps;
  const NamedTensors entries = hook_entries(saved, &steps);
  if (steps.defined()) sync_steps_ = steps.item<int64_t>();
  hook_->load_state(entries);
}

std::string Reducer::layout() const {
  std::ostringstream os;
  for (size_t b = 0; b < plan_.size(); ++b) {
    const at::Tensor& first = params_[plan_[b].front()];
    os << "bucket " << b << ": " << plan_[b].size() << " params" << (b + 1 == plan_.size() ? " + control, contributors" : "")
       << ", " << buckets_[b].elements << " elements, " << group_of(first);
    if (options_.zero_stage >= 1)
      os << ", zero stage " << options_.zero_stage << ": " << world_ << " shards of " << buckets_[b].shard;
    os << "\n";
  }
  return os.str();
}

int64_t Reducer::bucket_elements(size_t b) const { return buckets_.at(b).elements; }
int64_t Reducer::bucket_shard(size_t b) const { return buckets_.at(b).shard; }
const at::Tensor& Reducer::bucket_params(size_t b) const { return buckets_.at(b).params; }

at::Tensor Reducer::reduced_grad(size_t b, int64_t offset, int64_t length) const {
  const Bucket& bucket = buckets_.at(b);
  if (options_.zero_stage < 2) return bucket.buffer.narrow(0, offset, length);
  const int64_t begin = bucket.shard * rank_;
  XLAUNCH_ASSERT(offset >= begin && offset + length <= begin + bucket.shard, "a range inside this rank's shard");
  return bucket.grad_shard.narrow(0, offset - begin, length);
}

std::vector<at::Tensor> Reducer::reduced_grads() const {
  if (options_.zero_stage == 2) return grad_shards();
  std::vector<at::Tensor> out;
  for (const auto& p : params_) out.push_back(p.grad());
  return out;
}

std::vector<at::Tensor> Reducer::grad_shards() const {
  std::vector<at::Tensor> out;
  for (const Bucket& bucket : buckets_) {
    const int64_t begin = bucket.shard * rank_, end = std::min(bucket.elements, begin + bucket.shard);
    if (end <= begin) continue;
    out.push_back(options_.zero_stage == 2 ? bucket.grad_shard.narrow(0, 0, end - begin)
                                           : bucket.buffer.narrow(0, begin, end - begin));
  }
  return out;
}

std::shared_ptr<Work> Reducer::gather_params_async(size_t b) {
  Bucket& bucket = buckets_.at(b);
  XLAUNCH_ASSERT(bucket.params.defined(), "gather_params_async at zero_stage >= 1");
  if (world_ == 1 || bucket.shard == 0) return completed_work();
  return bucket.comm->allgather_async(bucket.params.narrow(0, bucket.shard * rank_, bucket.shard), bucket.params);
}

int64_t Reducer::reduce_scattered_bytes() const {
  if (options_.zero_stage < 2) return 0;
  int64_t bytes = 0;
  for (const Bucket& bucket : buckets_) bytes += bucket.shard * world_ * params_[plan_[bucket.index].front()].element_size();
  return bytes;
}

}  // namespace xlaunch
