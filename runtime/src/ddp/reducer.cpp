#include "xlaunch/reducer.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/full.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <sstream>

#include "profile/step_clock.h"
#include "check.h"
#include "comm/hierarchical_communicator.h"
#include "comm/shared_memory.h"
#include "ddp/accumulation.h"
#include "ddp/bucket_plan.h"
#include "ddp/contributors.h"
#include "ddp/control_word.h"
#include "watch/watchdog.h"
#include "xlaunch/error.h"
#include "ddp/grad_capture.h"
#include "ddp/stage_strategy.h"
#include "ddp/zero_layout.h"
#include "xlaunch/extend/comm_hook.h"
#include "xlaunch/zero_stages.h"

namespace xlaunch {

namespace {
// The control word over the first of `tail`, the last bucket's control element and contributors.
std::unique_ptr<ControlWord> make_control(const at::Tensor& tail, const Communicator& comm) {
  // Ranks that raised their bit are averaged into k/W: in 16 bits 1/W is still a normal number, not
  // rounded to zero, for W <= 2^14.
  const bool sixteen_bit = tail.element_size() == 2;
  if (sixteen_bit && comm.size() > (1 << 14))
    throw UsageError("the gradients of this model are 16-bit (" + group_of(tail) + ") and the job has " +
                     std::to_string(comm.size()) + " processes: the reducer's agreement across ranks " +
                     "needs 1/processes to be a normal 16-bit number (at most 16384 processes); train with " +
                     "float32 parameters (mixed_precision keeps 16-bit compute) or fewer processes");
  return std::make_unique<ControlWord>(tail.narrow(0, 0, 1), /*deferred=*/!tail.is_cpu());
}
// ddp.shard_group: what the stage cuts its shards over: the buckets' communicator, or with
// "machine" its machine group (comm/hierarchical_communicator.h). UsageError, naming the cause and
// the fix, where there is none.
std::shared_ptr<Communicator> shard_group_of(const std::shared_ptr<Communicator>& comm, const ReducerOptions& o) {
  if (o.shard_group == "world") return comm;
  if (o.shard_group != "machine")
    throw UsageError("ddp.shard_group '" + o.shard_group + "' is not one of world, machine");
  if (!shards_optimizer_state(o.zero_stage))
    throw UsageError("ddp.shard_group machine cuts ZeRO's shards within each machine, and ddp.zero_stage " +
                     std::to_string(o.zero_stage) + " shards nothing: set ddp.zero_stage 3 (FSDP's HYBRID_SHARD), 2 "
                     "(_HYBRID_SHARD_ZERO2) or 1, or leave ddp.shard_group at world");
  if (auto hier = std::dynamic_pointer_cast<HierarchicalCommunicator>(comm)) return hier->machine_group();
  std::string why;
  if (comm->size() == 1 || comm->name() == "shm")
    why = "every rank of this job is on one machine, where the machine's ranks are the whole job: leave "
          "ddp.shard_group at world (FULL_SHARD), which is the same sharding without a second communicator";
  else if (comm->name() == "nccl")
    why = "hybrid sharding of GPU buckets (NCCL) is not built yet: use ddp.shard_group world";
  else
    why = "this job's gradient buckets travel over flat " + comm->name() +
          ", not the hierarchical communicator that hybrid sharding is built on, which needs cpu_allreduce auto "
          "and the same number of ranks (at least 2) on every machine, with shared memory in each: start the "
          "same number of ranks on every machine (num_processes a multiple of num_machines), set "
          "cpu_allreduce auto, or use ddp.shard_group world";
  throw UsageError("ddp.shard_group machine (hybrid sharding: shard within each machine, replicate across "
                   "machines) cannot run here: " + why);
}

}  // namespace

Reducer::Reducer(std::vector<at::Tensor> params, std::vector<std::string> names, CommunicatorForDevice comm_for,
                 ReducerOptions options, std::vector<std::vector<size_t>> units)
    : params_(std::move(params)), names_(std::move(names)), options_(options) {
  XLAUNCH_ASSERT(params_.size() == names_.size(), "one name per parameter");
  if (options_.bucket_cap_mb <= 0)
    throw UsageError("bucket_cap_mb must be positive (got " + std::to_string(options_.bucket_cap_mb) +
                     "); set ddp.bucket_cap_mb in the config, e.g. 25");
  std::vector<BucketParam> sizes;
  for (const auto& p : params_) {
    sizes.push_back({p.numel() * static_cast<int64_t>(p.element_size()), group_of(p)});
    numels_.push_back(p.numel());
  }
  stage_ = make_stage_strategy(StageContext{options_, params_, plan_, buckets_, [this](size_t i) { hook_param(i); }});
  BucketCaps caps;
  caps.cap_bytes = static_cast<int64_t>(options_.bucket_cap_mb * 1024 * 1024);
  caps.first_cap_bytes = std::min(options_.first_bucket_bytes, caps.cap_bytes);
  caps.alone_from_cap = stage_->alone_from_cap();
  plan_ = units.empty() ? assign_buckets(sizes, caps) : std::move(units);
  hook_ = make_comm_hook(options_);
  stage_->check_hook(*hook_);

  buckets_.resize(plan_.size());
  slot_of_.resize(params_.size());
  ready_.assign(params_.size(), 0);
  for (size_t b = 0; b < plan_.size(); ++b) {
    ReducerBucket& bucket = buckets_[b];
    bucket.index = b;
    const bool last = b + 1 == plan_.size();
    for (size_t pos = 0; pos < plan_[b].size(); ++pos) {
      bucket.elements += params_[plan_[b][pos]].numel();
      slot_of_[plan_[b][pos]] = {b, pos};
    }
    bucket.comm = comm_for(params_[plan_[b].front()].device());
    world_ = bucket.comm->size();
    rank_ = bucket.comm->rank();
    if (!shard_comm_ || b == 0 || bucket.comm != buckets_[b - 1].comm) shard_comm_ = shard_group_of(bucket.comm, options_);
    bucket.shard_comm = shard_comm_;
    shard_world_ = shard_comm_->size();
    shard_rank_ = shard_comm_->rank();
    auto* group = dynamic_cast<MachineShardGroup*>(shard_comm_.get());
    replica_ = group ? group->replica() : 0;
    bucket.shard = zero::shard_elements(bucket.elements, shard_world_);
    const at::Tensor tail = stage_->add_bucket(bucket, last);
    if (last) {
      control_ = make_control(tail, *bucket.comm);
      contributors_ = std::make_unique<Contributors>(tail.narrow(0, 1, world_), rank_);
    }
    // Reduced where the gradients lie: over shared memory the others read them there; in a world
    // of one the average is the gradient itself, so copying it into the bucket would be a pass
    // over every gradient for nothing (3% of a large MLP's step on an H200).
    bucket.alone = world_ == 1;
    if (stage_->in_place_allowed() && hook_->reduces_in_place()) {
      SharedMemoryTransport* shm = shared_memory(*bucket.comm);
      bucket.zero_copy = bucket.alone || (shm && shm->holds(bucket.buffer));
    }
    hook_->add_bucket(bucket);
  }
  stage_->all_added();
  reserve_pools();
  install_hooks();
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

bool Reducer::in_place_ok(const ReducerBucket& bucket, size_t pos, const at::Tensor& grad) const {
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
  accumulators_.resize(params_.size());
  hook_keys_.resize(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) hook_param(i);
}

void Reducer::hook_param(size_t i) {
  // The AccumulateGrad node is held weakly by the parameter; keep it alive with our hook on it. A
  // parameter whose dtype changes (stage 3's param_dtype) gets a new node: the old one lives on in
  // the graphs that reach it, with its hook.
  auto acc = torch::autograd::impl::grad_accumulator(params_[i]);
  XLAUNCH_ASSERT(acc != nullptr, "trainable parameters have a gradient accumulator");
  if (acc == accumulators_[i]) return;
  auto hook = std::make_unique<torch::autograd::utils::LambdaPostHook>(
      [this, i](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
        on_grad_ready(i);
        return outputs;
      });
  hook_keys_[i] = acc->add_post_hook(std::move(hook));
  accumulators_[i] = std::move(acc);
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
    std::lock_guard<std::mutex> script_lk(script_mu_);
    if (scripting_) script_backward_ = script_.size();
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
  ReducerBucket& bucket = buckets_[slot_of_[i].first];
  if (ready_[i])
    throw UsageError("parameter '" + names_[i] + "' received its gradient twice in one backward " +
                     "(backward through the same graph twice, or a reentrant backward); " +
                     "run one backward per step through acc.backward(loss)");
  place_grad(i);
  ready_[i] = 1;
  if (--bucket.pending == 0) launch_ready_buckets();
}

void Reducer::place_grad(size_t i) {
  if (!stage_->slots()) return;  // the stage takes the gradients as their bucket starts
  const auto [b, pos] = slot_of_[i];
  ReducerBucket& bucket = buckets_[b];
  at::Tensor& grad = params_[i].mutable_grad();
  if (!in_place_ok(bucket, pos, grad)) {
    // A gradient the communicator cannot reach where it is (autograd made it outside the shared
    // pool, or there is none): move it into the bucket.
    bucket.views[pos].copy_(grad);
    grad = bucket.views[pos];
  }
}

void Reducer::launch_ready_buckets() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) launch_next();
}

void Reducer::launch_next() {
  {
    std::lock_guard<std::mutex> lk(script_mu_);
    if (scripting_) script_.push_back({false, next_launch_});
  }
  ReducerBucket& bucket = buckets_[next_launch_];
  const watch::BucketScope logged_as(static_cast<int>(next_launch_));
  if (bucket.zero_copy) {
    for (size_t i : plan_[next_launch_]) bucket.in_place.push_back(params_[i].grad());
    if (bucket.views.size() > plan_[next_launch_].size()) bucket.in_place.push_back(bucket.views.back());
  }
  bucket.work = stage_->start(bucket, *hook_);
  bucket.in_place.clear();
  if (on_launch_) on_launch_(next_launch_);
  ++next_launch_;
}

void Reducer::finalize_backward() {
  capture_.reset();  // backward is over: allocations go to the CPU allocator again
  std::vector<size_t> unused;
  {
    std::lock_guard<std::mutex> lk(mu_);
    XLAUNCH_ASSERT(armed_, "finalize_backward without prepare_for_backward");
    armed_ = false;
    if (!sync_) {
      stage_->backward_over();
      return;
    }
    for (size_t i = 0; i < params_.size(); ++i) {
      if (ready_[i]) continue;
      unused.push_back(i);
      ready_without_autograd(i, /*zeros=*/true);
    }
  }
  complete_sync(unused);
}

void Reducer::join_backward(bool contribute) {
  {
    std::lock_guard<std::mutex> lk(script_mu_);
    scripting_ = false;  // the replay is no step of this rank's own
  }
  contributing_ = contribute;
  prepare_for_backward(/*sync=*/true);
  contributing_ = true;
  std::vector<size_t> none;
  {
    std::lock_guard<std::mutex> lk(mu_);
    armed_ = false;
    // No autograd: every parameter is ready with what it holds, or with zeros, and the buckets
    // start in order as in any synced backward.
    for (size_t i = 0; i < params_.size(); ++i)
      ready_without_autograd(i, /*zeros=*/!contribute || !params_[i].grad().defined());
  }
  capture_.reset();
  // Stage 3: the backward's gathers between the reduce-scatters, as the last step issued them.
  replay_script(last_backward_, last_script_.size());
  complete_sync(none);
}

void Reducer::begin_step_script() {
  if (!shards_parameters(options_.zero_stage)) return;
  std::lock_guard<std::mutex> lk(script_mu_);
  script_.clear();
  script_backward_ = 0;
  scripting_ = true;
}

bool Reducer::has_step_script() const {
  std::lock_guard<std::mutex> lk(script_mu_);
  return !last_script_.empty();
}

void Reducer::replay_forward_script() {
  {
    std::lock_guard<std::mutex> lk(script_mu_);
    scripting_ = false;
  }
  replay_script(0, last_backward_);
}

void Reducer::replay_script(size_t from, size_t to) {
  for (size_t k = from; k < to && k < last_script_.size(); ++k) {
    const ScriptEvent e = last_script_[k];
    ReducerBucket& bucket = buckets_.at(e.bucket);
    if (e.gather) {
      // Whatever the unit's state here, the gather is issued: the others issue it.
      stage_->free_unit(bucket, false);
      stage_->gather_unit(bucket, /*exact=*/false);
      stage_->free_unit(bucket, false);
      continue;
    }
    std::lock_guard<std::mutex> lk(mu_);
    XLAUNCH_ASSERT(next_launch_ == e.bucket && bucket.pending == 0, "a joined rank's reduce-scatters in the recorded order");
    launch_next();
  }
}

void Reducer::ready_without_autograd(size_t i, bool zeros) {
  const auto [b, pos] = slot_of_[i];
  // Reduced as zeros: every rank still issues every bucket's collective, in order.
  if (zeros) stage_->zero_slot(buckets_[b], pos, params_[i].mutable_grad());
  else place_grad(i);
  ready_[i] = 1;
  --buckets_[b].pending;
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
      if (bucket.work) bucket.work->wait();  // the stage may have waited for it already
      bucket.work.reset();
    }
    stage_->all_waited();
    stage_->backward_over();
  }
  {
    std::lock_guard<std::mutex> lk(script_mu_);
    if (scripting_) {  // a complete step: what a joined rank repeats
      last_script_ = std::move(script_);
      last_backward_ = script_backward_;
      script_.clear();
      scripting_ = false;
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
       << ", " << buckets_[b].elements << " elements, " << group_of(first) << stage_->describe(buckets_[b])
       << "\n";
  }
  return os.str();
}

int64_t Reducer::bucket_elements(size_t b) const { return buckets_.at(b).elements; }
int64_t Reducer::bucket_shard(size_t b) const { return buckets_.at(b).shard; }
const at::Tensor& Reducer::bucket_params(size_t b) const { return buckets_.at(b).params; }

at::Tensor Reducer::reduced_grad(size_t b, int64_t offset, int64_t length) const {
  return stage_->reduced_grad(buckets_.at(b), offset, length);
}
std::vector<at::Tensor> Reducer::reduced_grads() const { return stage_->reduced_grads(); }
std::vector<at::Tensor> Reducer::grad_shards() const { return stage_->grad_shards(); }
const std::shared_ptr<Communicator>& Reducer::shard_communicator() const { return shard_comm_; }
std::shared_ptr<Work> Reducer::gather_params_async(size_t b) { return stage_->gather_params(buckets_.at(b)); }
at::Tensor Reducer::param_piece(size_t b, int64_t offset, int64_t length) const {
  return stage_->param_piece(buckets_.at(b), offset, length);
}
void Reducer::gather_unit(size_t b, bool exact) {
  {
    std::lock_guard<std::mutex> lk(script_mu_);
    if (scripting_ && !stage_->unit_whole(buckets_.at(b))) script_.push_back({true, b});
  }
  stage_->gather_unit(buckets_.at(b), exact);
}
void Reducer::wait_unit(size_t b) { stage_->wait_unit(buckets_.at(b)); }
void Reducer::free_unit(size_t b, bool keep_changes) { stage_->free_unit(buckets_.at(b), keep_changes); }
bool Reducer::unit_whole(size_t b) const { return stage_->unit_whole(buckets_.at(b)); }
int64_t Reducer::gathered_element_size(size_t b) const { return stage_->gathered_element_size(buckets_.at(b)); }
int64_t Reducer::reduce_scattered_bytes() const { return stage_->reduce_scattered_bytes(); }

}  // namespace xlaunch
