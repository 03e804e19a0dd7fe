// The environment pool (xlaunch/rl/env_pool.h). Who touches what:
//
//  - The training thread (the caller) owns the options, the actions (ActionSlots), which
//    environments are in flight, and the hand-over of batches. It never touches an environment
//    while it is in flight.
//  - An environment is stepped by one thread at a time: in a synchronous step, chunk 0 by the
//    caller and chunk t by worker t-1 (split_envs, pool_plan.h); asynchronously, by whichever worker
//    pops its id from the queue.
//  - Rows are written straight into the current batch's buffer (pool_batch.h): in environment order
//    in a synchronous step; asynchronously, an environment first steps into its own scratch row,
//    then claims the next row of the ring of batches with one atomic add, copies the row there and
//    counts it written; the worker that writes a batch's last row wakes the caller.
//
// Ordering: the caller writes an environment's action and request, then publishes it (the queue's
// release store, or the synchronous generation's); a worker acquires it before stepping. A worker's
// row is published by its release add on the batch's written count, acquired by the caller before
// the hand-over. So an environment's state passes from thread to thread always through the caller,
// with a happens-before edge each way, and needs no lock.
#include "xlaunch/rl/env_pool.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <thread>

#include "data/loader_stage.h"
#include "profile/step_clock.h"
#include "rl/doorbell.h"
#include "rl/pool_actions.h"
#include "rl/pool_batch.h"
#include "rl/pool_plan.h"
#include "xlaunch/env_vars.h"
#include "xlaunch/error.h"
#include "xlaunch/place.h"

namespace xlaunch::rl {

using detail::ActionSlots;
using detail::BatchShape;
using detail::BatchSlot;
using detail::Chunk;
using detail::Doorbell;
using detail::RowInfo;
using Clock = std::chrono::steady_clock;

namespace {

enum class Request : uint8_t { Reset, Step };
// Where an environment is, for the timeout's message (relaxed: only ever read for that).
enum EnvPhase : uint8_t { kIdle, kQueued, kStepping, kDone };

// One environment and what the pool keeps for it, on cache lines of its own: the thread that steps
// it writes them at every step.
struct alignas(64) EnvSlot {
  std::unique_ptr<Env> env;
  Rng rng;
  Request request = Request::Reset;  // asynchronous: what it was sent for
  bool needs_reset = false;          // NextStep: its last step ended the episode
  const char* calling = "";          // "step()" or "reset()", for the message when it throws
  double episode_return = 0;
  int64_t episode_length = 0;
  std::atomic<int64_t> steps{0};     // steps taken (the one being taken included)
  std::atomic<uint8_t> phase{kIdle};
  std::vector<float> scratch;        // asynchronous: the row (and final_obs) before it is claimed
};

struct Worker {
  Doorbell bell;
  alignas(64) std::atomic<uint64_t> progress{0};  // environments it finished, for the timeout
  std::thread thread;
};

// One step's outcome for a row.
struct Outcome {
  float reward = 0;
  bool terminated = false, truncated = false;
  RowInfo info;
};

void write_row(BatchSlot& s, int64_t r, int64_t env, const Outcome& o) {
  s.reward[r] = o.reward;
  s.terminated[r] = o.terminated;
  s.truncated[r] = o.truncated;
  s.env_id[r] = env;
  s.rows[r] = o.info;
}

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

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g s", s);
  return buf;
}

bool same_space(const Space& a, const Space& b) {
  return a.kind == b.kind && a.n == b.n && a.shape == b.shape && a.low == b.low && a.high == b.high;
}

}  // namespace

struct EnvPool::Impl {
  explicit Impl(EnvPoolOptions o);
  ~Impl();
  void start_threads(int thread_affinity_offset);

  EnvBatch reset();
  EnvBatch step(const at::Tensor& actions);
  void async_reset();
  void send(const at::Tensor& actions, const at::Tensor& env_ids);
  EnvBatch recv();

  // The doing.
  Outcome advance(EnvSlot& e, int64_t i, Request req, float* obs, float* final_obs);
  bool run_one(int64_t i, Request req, float* obs, float* final_obs, Outcome& out);
  void step_chunk(const Chunk& c, Request req, std::atomic<uint64_t>* progress);
  void step_async(int64_t i, Worker& w);
  void run_sync(Request req, const char* call);
  void worker_loop(int w);
  bool pop(int64_t& id);
  void push(const int64_t* ids, int64_t k);
  template <class Done>
  void await(Done done, const char* call);

  // The checks and messages.
  void fail(const std::string& message);
  void throw_if_failed() const;
  void require_sync(const char* call) const;
  void require_started(const char* call) const;
  void ensure_async();
  std::string name_env(int64_t i) const;
  std::string call_name(const char* call) const { return "EnvPool(" + spec.id + ")." + call; }
  std::string timeout_message(const char* call, double waited) const;
  at::Tensor cpu_contiguous(const at::Tensor& t) const;

  EnvPoolOptions options;
  EnvSpec spec;
  int64_t num_envs, batch_size, obs_numel;
  bool same_step;  // Autoreset::SameStep
  int num_threads = 1;
  double timeout_s = 0;  // 0: none
  std::shared_ptr<const xlaunch::detail::DeviceStage> stage;
  BatchShape sync_shape, async_shape;
  std::unique_ptr<EnvSlot[]> envs;
  ActionSlots actions;
  std::vector<int64_t> all_ids;  // 0..num_envs-1

  // The caller's bookkeeping.
  bool started = false;
  int64_t env_steps = 0;
  std::vector<uint8_t> in_flight, seen;
  int64_t in_flight_count = 0;
  int64_t next_batch = 0;  // asynchronous: the batch recv() returns next

  // Synchronous steps.
  std::vector<Chunk> chunks;
  BatchSlot sync_slot;
  Request sync_request = Request::Step;
  alignas(64) std::atomic<uint64_t> sync_generation{0};
  alignas(64) std::atomic<int> sync_done{0};

  // Asynchronous steps: the queue of environment ids (one producer, the caller; at most num_envs
  // in it, as each environment is in flight at most once), and the ring of batches.
  std::unique_ptr<std::atomic<int64_t>[]> queue;
  alignas(64) std::atomic<int64_t> pushed{0};
  alignas(64) std::atomic<int64_t> taken{0};
  alignas(64) std::atomic<int64_t> claimed{0};
  std::unique_ptr<BatchSlot[]> slots;
  int64_t num_slots = 0;

  // Threads and failure.
  std::unique_ptr<Worker[]> workers;
  int started_workers = 0;
  Doorbell caller_bell;
  std::atomic<bool> stopping{false};
  std::atomic<bool> failed{false};
  std::mutex fail_mu;
  std::string failure;  // written once, before `failed` is set
};

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

  const std::vector<int> cores = usable_cores();
  num_threads = options.num_threads > 0
                    ? static_cast<int>(std::min<int64_t>(options.num_threads, num_envs))
                    : detail::default_num_threads(static_cast<int>(cores.size()),
                                                  place_from_env(std::getenv).local_world_size, num_envs);
  chunks = detail::split_envs(num_envs, num_threads);
}

void EnvPool::Impl::start_threads(int offset) {
  const std::vector<int> cores = usable_cores();
  workers.reset(new Worker[num_threads]);
  for (int w = 0; w < num_threads; ++w) {
    workers[w].thread = std::thread([this, w] { worker_loop(w); });
    ++started_workers;
    if (offset < 0) continue;
    const int core = cores[detail::pinned_core_index(offset, w, static_cast<int>(cores.size()))];
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(core, &set);
    const int rc = pthread_setaffinity_np(workers[w].thread.native_handle(), sizeof set, &set);
    if (rc != 0)
      throw UsageError("EnvPool: pinning thread " + std::to_string(w) + " to core " + std::to_string(core) +
                       " (thread_affinity_offset " + std::to_string(offset) + ") failed: pthread_setaffinity_np: " +
                       std::strerror(rc) + "; set thread_affinity_offset to -1 (no pinning) or check the cores " +
                       "this process may use (taskset -p)");
  }
}

// The threads stop after their current environment's step (or synchronous chunk); what is still
// queued is dropped. Members are destroyed after the join, so no thread writes freed memory.
EnvPool::Impl::~Impl() {
  stopping.store(true, std::memory_order_seq_cst);
  for (int w = 0; w < started_workers; ++w) workers[w].bell.ring();
  for (int w = 0; w < started_workers; ++w) workers[w].thread.join();
}

// ---- stepping ---------------------------------------------------------------------------------

// Advances environment i by `req` (a step, or an episode's start), writing its observation to obs;
// final_obs (SameStep only) gets the ended episode's last observation, or zeros.
Outcome EnvPool::Impl::advance(EnvSlot& e, int64_t i, Request req, float* obs, float* final_obs) {
  Outcome o;
  if (req == Request::Step) e.steps.store(e.steps.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  if (req == Request::Reset || e.needs_reset) {  // NextStep: the step after an episode's end starts the next
    e.calling = "reset()";
    e.env->reset(e.rng, obs);
    e.needs_reset = false;
    e.episode_return = 0;
    e.episode_length = 0;
    o.info.stepped = req == Request::Step;
    if (final_obs) std::memset(final_obs, 0, obs_numel * sizeof(float));
    return o;
  }
  e.calling = "step()";
  ++e.episode_length;
  const StepResult r = e.env->step(actions.of(i), e.rng, obs);
  e.episode_return += r.reward;
  o.reward = static_cast<float>(r.reward);
  o.terminated = r.terminated;
  o.truncated = r.truncated || (spec.max_episode_steps > 0 && e.episode_length >= spec.max_episode_steps);
  o.info.stepped = true;
  if (o.terminated || o.truncated) {
    o.info.episode_return = e.episode_return;
    o.info.episode_length = e.episode_length;
    if (final_obs) {  // SameStep: this row already holds the next episode's first observation
      std::memcpy(final_obs, obs, obs_numel * sizeof(float));
      e.calling = "reset()";
      e.env->reset(e.rng, obs);
      e.episode_return = 0;
      e.episode_length = 0;
    } else {
      e.needs_reset = true;
    }
  } else if (final_obs) {
    std::memset(final_obs, 0, obs_numel * sizeof(float));
  }
  return o;
}

bool EnvPool::Impl::run_one(int64_t i, Request req, float* obs, float* final_obs, Outcome& out) {
  EnvSlot& e = envs[i];
  e.phase.store(kStepping, std::memory_order_relaxed);
  std::string what;
  try {
    out = advance(e, i, req, obs, final_obs);
    return true;
  } catch (const std::exception& ex) {
    what = ex.what();
  } catch (...) {
    what = "an exception that is not a std::exception";
  }
  fail("EnvPool(" + spec.id + "): environment " + std::to_string(i) + " of " + std::to_string(num_envs) +
       " threw in " + e.calling + " at its step " + std::to_string(e.steps.load(std::memory_order_relaxed)) +
       " (step " + std::to_string(e.episode_length) + " of its episode): " + what +
       ". The pool cannot continue: make a new EnvPool");
  return false;
}

void EnvPool::Impl::step_chunk(const Chunk& c, Request req, std::atomic<uint64_t>* progress) {
  BatchSlot& s = sync_slot;
  for (int64_t i = c.begin; i < c.end; ++i) {
    Outcome o;
    if (!run_one(i, req, s.obs + i * obs_numel, s.final_obs ? s.final_obs + i * obs_numel : nullptr, o)) return;
    write_row(s, i, i, o);
    envs[i].phase.store(kIdle, std::memory_order_relaxed);
    if (progress) progress->store(progress->load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
}

void EnvPool::Impl::step_async(int64_t i, Worker& w) {
  EnvSlot& e = envs[i];
  float* obs = e.scratch.data();
  float* final_obs = same_step ? obs + obs_numel : nullptr;
  Outcome o;
  if (!run_one(i, e.request, obs, final_obs, o)) return;
  // The first environments to finish take the first rows: recv() returns them in that order.
  const int64_t c = claimed.fetch_add(1, std::memory_order_relaxed);
  const int64_t k = c / batch_size, r = c % batch_size;
  BatchSlot& s = slots[k % num_slots];
  // The slot was handed over and allocated afresh for batch k before any of its rows can be claimed
  // (async_batches, pool_plan.h); the acquire makes its new buffer visible here.
  while (s.batch.load(std::memory_order_acquire) != k) {
    if (stopping.load(std::memory_order_relaxed)) return;
    std::this_thread::yield();
  }
  std::memcpy(s.obs + r * obs_numel, obs, obs_numel * sizeof(float));
  if (final_obs) std::memcpy(s.final_obs + r * obs_numel, final_obs, obs_numel * sizeof(float));
  write_row(s, r, i, o);
  e.phase.store(kDone, std::memory_order_relaxed);
  w.progress.store(w.progress.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  if (s.written.fetch_add(1, std::memory_order_acq_rel) + 1 == batch_size) caller_bell.ring();
}

// Workers wait for work without a deadline: work comes only from the caller, whose own waits are
// bounded, and the destructor wakes them to stop.
void EnvPool::Impl::worker_loop(int w) {
  Worker& me = workers[w];
  uint64_t seen_generation = 0;
  const bool in_sync = w + 1 < static_cast<int>(chunks.size());
  for (;;) {
    const uint64_t bell = me.bell.seq();
    if (stopping.load(std::memory_order_acquire)) return;
    const uint64_t generation = sync_generation.load(std::memory_order_acquire);
    if (in_sync && generation != seen_generation) {
      seen_generation = generation;
      step_chunk(chunks[w + 1], sync_request, &me.progress);
      if (sync_done.fetch_add(1, std::memory_order_acq_rel) + 1 == num_threads - 1) caller_bell.ring();
      continue;
    }
    int64_t id = 0;
    if (pop(id)) {
      step_async(id, me);
      continue;
    }
    me.bell.wait(bell, Clock::time_point::max());
  }
}

// Lock-free: the id is read before the compare-exchange claims its position. While position t is
// unclaimed, t..t+num_envs-1 are all in flight, so the caller cannot overwrite position t (it would
// be the num_envs+1-th environment in flight); a claim that succeeds read the id of t.
bool EnvPool::Impl::pop(int64_t& id) {
  int64_t t = taken.load(std::memory_order_acquire);
  for (;;) {
    if (t >= pushed.load(std::memory_order_acquire)) return false;
    id = queue[t % num_envs].load(std::memory_order_relaxed);
    if (taken.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel, std::memory_order_acquire)) return true;
  }
}

void EnvPool::Impl::push(const int64_t* ids, int64_t k) {
  const int64_t p = pushed.load(std::memory_order_relaxed);
  for (int64_t j = 0; j < k; ++j) queue[(p + j) % num_envs].store(ids[j], std::memory_order_relaxed);
  pushed.store(p + k, std::memory_order_release);
  for (int w = 0; w < std::min<int64_t>(k, num_threads); ++w) workers[w].bell.ring();
}

void EnvPool::Impl::run_sync(Request req, const char* call) {
  sync_request = req;
  if (num_threads > 1) {
    sync_done.store(0, std::memory_order_relaxed);
    sync_generation.fetch_add(1, std::memory_order_release);
    for (int w = 0; w + 1 < num_threads; ++w) workers[w].bell.ring();
  }
  step_chunk(chunks[0], req, nullptr);
  if (num_threads > 1) await([&] { return sync_done.load(std::memory_order_acquire) == num_threads - 1; }, call);
  throw_if_failed();
}

// Waits until done() (or a failure), spinning briefly and then sleeping; throws when no worker
// finished an environment for timeout_s.
template <class Done>
void EnvPool::Impl::await(Done done, const char* call) {
  if (done() || failed.load(std::memory_order_acquire)) return;
  const auto total_progress = [&] {
    uint64_t p = 0;
    for (int w = 0; w < num_threads; ++w) p += workers[w].progress.load(std::memory_order_relaxed);
    return p;
  };
  const auto window = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  const Clock::time_point t0 = Clock::now();
  Clock::time_point deadline = timeout_s > 0 ? t0 + window : Clock::time_point::max();
  uint64_t progress = total_progress();
  for (;;) {
    const uint64_t seen_bell = caller_bell.seq();
    if (done() || failed.load(std::memory_order_acquire)) return;
    if (caller_bell.wait(seen_bell, deadline)) continue;
    const uint64_t now = total_progress();
    if (now != progress) {  // slow, not stuck: the deadline is for lack of progress
      progress = now;
      deadline = Clock::now() + window;
      continue;
    }
    fail(timeout_message(call, seconds_since(t0)));
    throw_if_failed();
  }
}

// ---- checks and messages ----------------------------------------------------------------------

void EnvPool::Impl::fail(const std::string& message) {
  {
    std::lock_guard<std::mutex> lk(fail_mu);
    if (!failed.load(std::memory_order_relaxed)) {
      failure = message;
      failed.store(true, std::memory_order_release);
    }
  }
  caller_bell.ring();
}

void EnvPool::Impl::throw_if_failed() const {
  if (failed.load(std::memory_order_acquire)) throw Error(failure);
}

std::string EnvPool::Impl::name_env(int64_t i) const {
  return "environment " + std::to_string(i) + " (" + spec.id + ", its step " +
         std::to_string(envs[i].steps.load(std::memory_order_relaxed)) + ")";
}

std::string EnvPool::Impl::timeout_message(const char* call, double waited) const {
  std::string stepping, queued, done;
  int listed = 0;
  const auto add = [&](std::string& list, int64_t i) {
    if (++listed > 32) return;
    list += (list.empty() ? "" : ", ") + std::to_string(i) + " (its step " +
            std::to_string(envs[i].steps.load(std::memory_order_relaxed)) + ")";
  };
  for (int64_t i = 0; i < num_envs; ++i) {
    const uint8_t p = envs[i].phase.load(std::memory_order_relaxed);
    if (p == kStepping)
      add(stepping, i);
    else if (in_flight[i] && p == kQueued)
      add(queued, i);
    else if (in_flight[i] && p == kDone)
      add(done, i);
  }
  std::string m = call_name(call) + " waited " + seconds(waited) + ", the last " + seconds(timeout_s) +
                  " (timeout_s, or XLAUNCH_TIMEOUT_S) without any environment finishing its step or reset; ";
  m += "environments stepping: " + (stepping.empty() ? std::string("none") : stepping);
  if (!queued.empty()) m += "; queued, not started: " + queued;
  if (!done.empty()) m += "; finished, waiting for the rest of the batch: " + done;
  m += ". An environment that blocks is stuck in its step(): fix it, or raise timeout_s if its steps are this "
       "slow. The pool cannot continue: make a new EnvPool";
  return m;
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

EnvBatch EnvPool::Impl::reset() {
  const profile::PhaseScope phase(profile::kDataWait);
  throw_if_failed();
  require_sync("reset()");
  run_sync(Request::Reset, "reset()");
  started = true;
  return sync_slot.take(*stage, sync_shape, &env_steps);
}

EnvBatch EnvPool::Impl::step(const at::Tensor& a) {
  const profile::PhaseScope phase(profile::kDataWait);
  throw_if_failed();
  require_sync("step()");
  require_started("step()");
  if (!a.defined()) throw UsageError(call_name("step()") + ": actions is an undefined tensor");
  detail::store_actions(spec.action_space, cpu_contiguous(a), all_ids.data(), num_envs, call_name("step()"),
                        [this](int64_t i) { return name_env(i); }, actions);
  run_sync(Request::Step, "step()");
  return sync_slot.take(*stage, sync_shape, &env_steps);
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
  const std::string call = call_name("send()");
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
  EnvBatch b = s.take(*stage, async_shape, &env_steps);
  s.written.store(0, std::memory_order_relaxed);
  s.batch.store(next_batch + num_slots, std::memory_order_release);
  ++next_batch;
  return b;
}

// ---- EnvPool ----------------------------------------------------------------------------------

EnvPool::EnvPool(EnvPoolOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
  impl_->start_threads(impl_->options.thread_affinity_offset);
}

EnvPool::~EnvPool() = default;

const EnvSpec& EnvPool::spec() const { return impl_->spec; }
int64_t EnvPool::num_envs() const { return impl_->num_envs; }
int64_t EnvPool::batch_size() const { return impl_->batch_size; }
int EnvPool::num_threads() const { return impl_->num_threads; }
EnvBatch EnvPool::reset() { return impl_->reset(); }
EnvBatch EnvPool::step(const at::Tensor& actions) { return impl_->step(actions); }
void EnvPool::async_reset() { impl_->async_reset(); }
void EnvPool::send(const at::Tensor& actions, const at::Tensor& env_ids) { impl_->send(actions, env_ids); }
EnvBatch EnvPool::recv() { return impl_->recv(); }
int64_t EnvPool::env_steps() const { return impl_->env_steps; }

}  // namespace xlaunch::rl
