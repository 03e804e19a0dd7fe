// The environment pool (xlaunch/rl/env_pool.h): its construction, the calls and their checks. The
// threads and the stepping are in pool_stepping.cpp; what they share, and who touches what, in
// pool_impl.h.
#include "xlaunch/rl/env_pool.h"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include <ATen/Parallel.h>

#include "profile/step_clock.h"
#include "rl/pool_impl.h"
#include "xlaunch/env_vars.h"
#include "xlaunch/error.h"
#include "xlaunch/place.h"
#include "xlaunch/rl/tensor_env.h"

namespace xlaunch::rl {
namespace {

std::vector<int> usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0)
    throw Error("EnvPool: sched_getaffinity failed: " + std::string(std::strerror(errno)));
  std::vector<int> cores;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cores.push_back(c);
  return cores;
}

bool same_space(const Space& a, const Space& b) {
  return a.kind == b.kind && a.n == b.n && a.shape == b.shape && a.low == b.low && a.high == b.high;
}

}  // namespace

// ---- construction ----------------------------------------------------------------------------

EnvPool::Impl::Impl(EnvPoolOptions o)
    : options(std::move(o)),
      sync_shape(1, {1}, false),
      async_shape(1, {1}, false),
      actions(Space::discrete(1), 0) {
  if (options.env_id.empty() == !options.factory)
    throw UsageError(options.env_id.empty()
                         ? "EnvPool: EnvPoolOptions names no environment: set env_id (a registered id) or factory"
                         : "EnvPool: EnvPoolOptions sets both env_id ('" + options.env_id +
                               "') and factory: set one of them");
  num_envs = options.num_envs;
  if (num_envs < 1)
    throw UsageError("EnvPool: num_envs is " + std::to_string(num_envs) + "; it must be at least 1");
  batch_size = options.batch_size == 0 ? num_envs : options.batch_size;
  if (batch_size < 1 || batch_size > num_envs)
    throw UsageError("EnvPool: batch_size is " + std::to_string(options.batch_size) + " for " +
                     std::to_string(num_envs) + " environments; it must be 0 (synchronous: all of them) or 1.." +
                     std::to_string(num_envs));
  if (options.num_threads < 0)
    throw UsageError("EnvPool: num_threads is " + std::to_string(options.num_threads) +
                     "; it must be 0 (this rank's share of the cores) or a count of threads");
  if (!(options.timeout_s >= 0) || !std::isfinite(options.timeout_s))
    throw UsageError("EnvPool: timeout_s is " + std::to_string(options.timeout_s) +
                     "; it must be 0 (XLAUNCH_TIMEOUT_S) or a number of seconds");
  timeout_s = options.timeout_s;
  if (timeout_s == 0) {
    const long t = env::get_int(env::kTimeoutS);
    if (t < 0) throw env::bad_value(env::kTimeoutS, env::raw(env::kTimeoutS), "a number of seconds >= 0");
    timeout_s = static_cast<double>(t);
  }
  // Beyond a billion seconds (32 years) is forever; it would overflow the clock's nanoseconds.
  if (timeout_s > 1e9) timeout_s = 0;
  stage = xlaunch::detail::make_device_stage(options.device, /*pin_memory=*/true, "EnvPool");

  envs.reset(new EnvSlot[num_envs]);
  for (int64_t i = 0; i < num_envs; ++i) {
    envs[i].env = options.factory ? options.factory() : make_env(options.env_id);
    if (!envs[i].env)
      throw UsageError("EnvPool: the factory returned no environment (a null pointer) for environment " +
                       std::to_string(i));
    const EnvSpec& s = envs[i].env->spec();
    if (i == 0) {
      spec = s;
      if (spec.observation_space.kind != Space::Kind::Box || spec.observation_space.numel() < 1)
        throw UsageError("EnvPool: environment " + spec.id + " has the observation space " +
                         spec.observation_space.describe() + "; the pool needs a Box of at least one element");
      if (spec.action_space.numel() < 1 ||
          (spec.action_space.kind == Space::Kind::Discrete && spec.action_space.n < 1))
        throw UsageError("EnvPool: environment " + spec.id + " has the empty action space " +
                         spec.action_space.describe());
    } else if (s.id != spec.id || !same_space(s.observation_space, spec.observation_space) ||
               !same_space(s.action_space, spec.action_space) || s.max_episode_steps != spec.max_episode_steps) {
      throw UsageError("EnvPool: environment " + std::to_string(i) + " (" + s.id + ", observations " +
                       s.observation_space.describe() + ", actions " + s.action_space.describe() +
                       ") differs from environment 0 (" + spec.id + ", observations " +
                       spec.observation_space.describe() + ", actions " + spec.action_space.describe() +
                       "): the factory must make environments of one spec");
    }
    envs[i].rng = Rng(env_seed(options.seed, i));
  }
  step_call = call_name("step()");
  send_call = call_name("send()");
  obs_numel = spec.observation_space.numel();
  same_step = options.autoreset == Autoreset::SameStep;
  for (int64_t i = 0; i < num_envs; ++i) envs[i].scratch.assign((same_step ? 2 : 1) * obs_numel, 0.f);
  actions = ActionSlots(spec.action_space, num_envs);
  all_ids.resize(num_envs);
  for (int64_t i = 0; i < num_envs; ++i) all_ids[i] = i;
  in_flight.assign(num_envs, 0);
  seen.assign(num_envs, 0);
  sync_shape = BatchShape(num_envs, spec.observation_space.shape, same_step);
  async_shape = BatchShape(batch_size, spec.observation_space.shape, same_step);
  if (batch_size == num_envs) sync_slot.allocate(*stage, sync_shape);
  queue.reset(new std::atomic<int64_t>[num_envs]);

  cores = usable_cores();
  num_threads = options.num_threads > 0
                    ? static_cast<int>(std::min<int64_t>(options.num_threads, num_envs))
                    : detail::default_num_threads(static_cast<int>(cores.size()),
                                                  place_from_env(std::getenv).local_world_size, num_envs);
  chunks = detail::split_envs(num_envs, num_threads);
}

std::string EnvPool::Impl::name_env(int64_t i) const {
  return "environment " + std::to_string(i) + " (" + spec.id + ", its step " +
         std::to_string(envs[i].steps.load(std::memory_order_relaxed)) + ")";
}

void EnvPool::Impl::require_sync(const char* call) const {
  if (batch_size != num_envs)
    throw UsageError(call_name(call) + ": this pool is asynchronous (batch_size " + std::to_string(batch_size) +
                     " of " + std::to_string(num_envs) +
                     " environments): use async_reset(), send() and recv(), or make the pool with batch_size 0 "
                     "to step every environment at once");
  if (in_flight_count > 0)
    throw UsageError(call_name(call) + ": " + std::to_string(in_flight_count) +
                     " environments are in flight (sent, not yet returned by recv()): recv() them before a "
                     "synchronous " + call);
}

void EnvPool::Impl::require_started(const char* call) const {
  if (!started)
    throw UsageError(call_name(call) + ": no environment has started an episode yet: call reset() (or async_reset()) "
                     "first");
}

void EnvPool::Impl::ensure_async() {
  if (slots) return;
  num_slots = detail::async_batches(num_envs, batch_size);
  slots.reset(new BatchSlot[num_slots]);
  for (int64_t j = 0; j < num_slots; ++j) {
    slots[j].allocate(*stage, async_shape);
    slots[j].batch.store(next_batch + j, std::memory_order_release);
  }
}

at::Tensor EnvPool::Impl::cpu_contiguous(const at::Tensor& t) const {
  return (t.device().is_cpu() ? t : t.to(at::kCPU)).contiguous();
}

// ---- the calls --------------------------------------------------------------------------------

// A batch's hand-over may fail (no memory for the next buffer, a failed copy to the device); the
// caller's bookkeeping has then moved on without it, so the pool cannot continue.
// The environment steps it hands over are the report's samples (samples/s: environment steps per
// second), as a loader's samples are; resets add none.
EnvBatch EnvPool::Impl::hand_over(BatchSlot& slot, const BatchShape& shape) {
  const int64_t steps_before = env_steps;
  try {
    EnvBatch b = slot.take(*stage, shape, &env_steps);
    profile::add_samples(static_cast<uint64_t>(env_steps - steps_before));
    return b;
  } catch (const std::exception& e) {
    fail(call_name("hand-over") + ": handing a batch over failed: " + e.what() +
         ". The pool cannot continue: make a new EnvPool");
    throw;
  }
}

EnvBatch EnvPool::Impl::reset() {
  const profile::PhaseScope phase(profile::kDataWait);
  throw_if_failed();
  require_sync("reset()");
  run_sync(Request::Reset, "reset()");
  started = true;
  return hand_over(sync_slot, sync_shape);
}

EnvBatch EnvPool::Impl::step(const at::Tensor& a) {
  const profile::PhaseScope phase(profile::kDataWait);
  throw_if_failed();
  require_sync("step()");
  require_started("step()");
  if (!a.defined()) throw UsageError(step_call + ": actions is an undefined tensor");
  detail::store_actions(spec.action_space, cpu_contiguous(a), all_ids.data(), num_envs, step_call,
                        [this](int64_t i) { return name_env(i); }, actions);
  run_sync(Request::Step, "step()");
  return hand_over(sync_slot, sync_shape);
}

void EnvPool::Impl::async_reset() {
  throw_if_failed();
  if (in_flight_count > 0)
    throw UsageError(call_name("async_reset()") + ": " + std::to_string(in_flight_count) +
                     " environments are in flight (sent, not yet returned by recv()): recv() them first");
  ensure_async();
  for (int64_t i = 0; i < num_envs; ++i) {
    envs[i].request = Request::Reset;
    envs[i].phase.store(kQueued, std::memory_order_relaxed);
    in_flight[i] = 1;
  }
  in_flight_count = num_envs;
  started = true;
  push(all_ids.data(), num_envs);
}

void EnvPool::Impl::send(const at::Tensor& a, const at::Tensor& ids_tensor) {
  throw_if_failed();
  require_started("send()");
  const std::string& call = send_call;
  if (!a.defined() || !ids_tensor.defined()) throw UsageError(call + ": actions or env_ids is an undefined tensor");
  if (ids_tensor.scalar_type() != at::kLong || ids_tensor.dim() != 1)
    throw UsageError(call + ": env_ids has dtype " + std::string(c10::toString(ids_tensor.scalar_type())) +
                     " and " + std::to_string(ids_tensor.dim()) +
                     " dimensions; expected an int64 tensor of shape [K] (as recv() returns in EnvBatch::env_id)");
  const at::Tensor ids = cpu_contiguous(ids_tensor);
  const int64_t k = ids.size(0);
  const int64_t* id = ids.data_ptr<int64_t>();
  const auto name = [this](int64_t i) { return name_env(i); };
  detail::check_send_ids(id, k, num_envs, in_flight, call, name, seen);
  detail::store_actions(spec.action_space, cpu_contiguous(a), id, k, call, name, actions);
  ensure_async();
  for (int64_t r = 0; r < k; ++r) {
    envs[id[r]].request = Request::Step;
    envs[id[r]].phase.store(kQueued, std::memory_order_relaxed);
    in_flight[id[r]] = 1;
  }
  in_flight_count += k;
  push(id, k);
}

EnvBatch EnvPool::Impl::recv() {
  const profile::PhaseScope phase(profile::kDataWait);
  throw_if_failed();
  if (in_flight_count < batch_size) {
    std::string idle;
    int listed = 0;
    for (int64_t i = 0; i < num_envs && listed < 16; ++i)
      if (!in_flight[i]) idle += (listed++ ? ", " : "") + std::to_string(i);
    throw UsageError(call_name("recv()") + ": " + std::to_string(in_flight_count) +
                     " environments are in flight, fewer than batch_size " + std::to_string(batch_size) +
                     ", so no batch can complete: send() actions for at least " +
                     std::to_string(batch_size - in_flight_count) + " more (environments not in flight: " + idle +
                     (num_envs - in_flight_count > 16 ? ", ..." : "") + ")" +
                     (started ? "" : ", or call async_reset() first"));
  }
  BatchSlot& s = slots[next_batch % num_slots];
  await([&] { return s.written.load(std::memory_order_acquire) == batch_size; }, "recv()");
  throw_if_failed();
  for (int64_t r = 0; r < batch_size; ++r) in_flight[s.env_id[r]] = 0;
  in_flight_count -= batch_size;
  EnvBatch b = hand_over(s, async_shape);
  s.written.store(0, std::memory_order_relaxed);
  s.batch.store(next_batch + num_slots, std::memory_order_release);
  ++next_batch;
  return b;
}

// ---- EnvPool ----------------------------------------------------------------------------------

namespace {

// EnvBackend::Tensor: the options a TensorEnv takes; the thread pool's own are refused by name.
std::unique_ptr<TensorEnv> tensor_backend(const EnvPoolOptions& o) {
  const auto refuse = [](const std::string& what) {
    throw UsageError("EnvPool: backend Tensor " + what +
                     " (the tensor backend steps every environment at once, as tensors on the device)");
  };
  if (o.factory) refuse("takes a built-in env_id; for your own environment write a TensorEnvironment and give it to TensorEnv");
  if (o.batch_size != 0 && o.batch_size != o.num_envs)
    refuse("is synchronous: batch_size is " + std::to_string(o.batch_size) + "; leave it 0 (all " +
           std::to_string(o.num_envs) + " environments)");
  if (o.num_threads != 0 || o.thread_affinity_offset >= 0)
    refuse("has no threads of its own (num_threads " + std::to_string(o.num_threads) + ", thread_affinity_offset " +
           std::to_string(o.thread_affinity_offset) + "): it runs on the intra-op threads; leave both unset");
  TensorEnvOptions t;
  t.env_id = o.env_id;
  t.num_envs = o.num_envs;
  t.seed = o.seed;
  t.device = o.device;
  t.autoreset = o.autoreset;
  return std::make_unique<TensorEnv>(std::move(t));
}

[[noreturn]] void tensor_async(const char* call) {
  throw UsageError(std::string("EnvPool::") + call +
                   ": the tensor backend (EnvBackend::Tensor) steps every environment at once; use reset() and "
                   "step(), or the thread backend for send/recv");
}

}  // namespace

EnvPool::EnvPool(EnvPoolOptions options) {
  if (options.backend == EnvBackend::Tensor) {
    tensor_ = tensor_backend(options);
    return;
  }
  impl_ = std::make_unique<Impl>(std::move(options));
  impl_->start_threads(impl_->options.thread_affinity_offset);
}

EnvPool::~EnvPool() = default;

const EnvSpec& EnvPool::spec() const { return tensor_ ? tensor_->spec() : impl_->spec; }
int64_t EnvPool::num_envs() const { return tensor_ ? tensor_->num_envs() : impl_->num_envs; }
int64_t EnvPool::batch_size() const { return tensor_ ? tensor_->num_envs() : impl_->batch_size; }
int EnvPool::num_threads() const { return tensor_ ? at::get_num_threads() : impl_->num_threads; }
EnvBatch EnvPool::reset() { return tensor_ ? tensor_->reset() : impl_->reset(); }
EnvBatch EnvPool::step(const at::Tensor& actions) { return tensor_ ? tensor_->step(actions) : impl_->step(actions); }
void EnvPool::async_reset() {
  if (tensor_) tensor_async("async_reset");
  impl_->async_reset();
}
void EnvPool::send(const at::Tensor& actions, const at::Tensor& env_ids) {
  if (tensor_) tensor_async("send");
  impl_->send(actions, env_ids);
}
EnvBatch EnvPool::recv() {
  if (tensor_) tensor_async("recv");
  return impl_->recv();
}
int64_t EnvPool::env_steps() const { return tensor_ ? tensor_->env_steps() : impl_->env_steps; }

}  // namespace xlaunch::rl
