// The pool's threads, and how an environment is stepped and its row written (pool_impl.h).
#include <pthread.h>
#include <sched.h>

#include <cstdio>
#include <cstring>

#include "rl/pool_impl.h"
#include "xlaunch/error.h"

namespace xlaunch::rl {
namespace {

void write_row(BatchSlot& s, int64_t r, int64_t env, const Outcome& o) {
  s.reward[r] = o.reward;
  s.terminated[r] = o.terminated;
  s.truncated[r] = o.truncated;
  s.env_id[r] = env;
  s.rows[r] = o.info;
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g s", s);
  return buf;
}

}  // namespace

void EnvPool::Impl::start_threads(int offset) {
  workers.reset(new Worker[num_threads]);
  for (int w = 0; w < num_threads; ++w) {
    workers[w].thread = std::thread([this, w] {
      worker_loop(w);
      workers[w].exited.store(true, std::memory_order_release);
      caller_bell.ring();
    });
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
// A thread stuck in an environment's step cannot be stopped from outside: after timeout_s the
// destructor says which environments it waits for (once, on stderr), and goes on waiting.
EnvPool::Impl::~Impl() {
  stopping.store(true, std::memory_order_seq_cst);
  for (int w = 0; w < started_workers; ++w) workers[w].bell.ring();
  const auto all_exited = [&] {
    for (int w = 0; w < started_workers; ++w)
      if (!workers[w].exited.load(std::memory_order_acquire)) return false;
    return true;
  };
  if (timeout_s > 0) {
    const Clock::time_point t0 = Clock::now();
    const auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
    for (;;) {
      const uint64_t seen = caller_bell.seq();
      if (all_exited()) break;
      if (caller_bell.wait(seen, deadline)) continue;
      const std::string stepping = envs_in(kStepping, false);
      std::fprintf(stderr,
                   "xlaunch: EnvPool(%s) is being destroyed and its threads have not stopped for %s (timeout_s): "
                   "environments stepping: %s. They are stuck in their step() or reset(); the destructor goes on "
                   "waiting for them\n",
                   spec.id.c_str(), seconds(timeout_s).c_str(), stepping.empty() ? "none" : stepping.c_str());
      break;
    }
  }
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
  // k workers, taken in turn: a send of one environment at a time still reaches every worker.
  for (int64_t j = 0; j < std::min<int64_t>(k, num_threads); ++j) workers[next_worker++ % num_threads].bell.ring();
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

// The environments in `phase` (only those in flight, if asked), with their steps, for messages: at
// most 32, then "...".
std::string EnvPool::Impl::envs_in(uint8_t phase, bool in_flight_only) const {
  std::string list;
  int listed = 0;
  for (int64_t i = 0; i < num_envs; ++i) {
    if (envs[i].phase.load(std::memory_order_relaxed) != phase || (in_flight_only && !in_flight[i])) continue;
    if (++listed > 32) return list + ", ...";
    list += (list.empty() ? "" : ", ") + std::to_string(i) + " (its step " +
            std::to_string(envs[i].steps.load(std::memory_order_relaxed)) + ")";
  }
  return list;
}

std::string EnvPool::Impl::timeout_message(const char* call, double waited) const {
  const std::string stepping = envs_in(kStepping, false), queued = envs_in(kQueued, true),
                    done = envs_in(kDone, true);
  std::string m = call_name(call) + " waited " + seconds(waited) + ", the last " + seconds(timeout_s) +
                  " (timeout_s, or XLAUNCH_TIMEOUT_S) without any environment finishing its step or reset; ";
  m += "environments stepping: " + (stepping.empty() ? std::string("none") : stepping);
  if (!queued.empty()) m += "; queued, not started: " + queued;
  if (!done.empty()) m += "; finished, waiting for the rest of the batch: " + done;
  m += ". An environment that blocks is stuck in its step(): fix it, or raise timeout_s if its steps are this "
       "slow. The pool cannot continue: make a new EnvPool";
  return m;
}

}  // namespace xlaunch::rl
