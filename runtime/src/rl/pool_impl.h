// Private to the environment pool: EnvPool::Impl, shared by env_pool.cpp (construction, the
// calls, their checks) and pool_stepping.cpp (the threads and how they step environments).
//
// Who touches what:
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
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "data/loader_stage.h"
#include "rl/doorbell.h"
#include "rl/pool_actions.h"
#include "rl/pool_batch.h"
#include "rl/pool_plan.h"
#include "xlaunch/rl/env_pool.h"

namespace xlaunch::rl {

namespace detail {

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
  std::atomic<bool> exited{false};                 // its loop has returned (the destructor's wait)
  std::thread thread;
};

// One step's outcome for a row.
struct Outcome {
  float reward = 0;
  bool terminated = false, truncated = false;
  RowInfo info;
};

}  // namespace detail

using detail::ActionSlots;
using detail::BatchShape;
using detail::BatchSlot;
using detail::Chunk;
using detail::Doorbell;
using detail::EnvSlot;
using detail::kDone;
using detail::kIdle;
using detail::kQueued;
using detail::kStepping;
using detail::Outcome;
using detail::Request;
using detail::RowInfo;
using detail::Worker;
using Clock = std::chrono::steady_clock;

struct EnvPool::Impl {
  explicit Impl(EnvPoolOptions o);
  ~Impl();
  void start_threads(int thread_affinity_offset);

  EnvBatch reset();
  EnvBatch step(const at::Tensor& actions);
  void async_reset();
  void send(const at::Tensor& actions, const at::Tensor& env_ids);
  EnvBatch recv();
  EnvBatch hand_over(BatchSlot& slot, const BatchShape& shape);

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
  std::string envs_in(uint8_t phase, bool in_flight_only) const;
  std::string timeout_message(const char* call, double waited) const;
  at::Tensor cpu_contiguous(const at::Tensor& t) const;

  EnvPoolOptions options;
  EnvSpec spec;
  std::string step_call, send_call;  // call_name of step() and send(), made once: they run every step
  int64_t num_envs, batch_size, obs_numel;
  bool same_step;  // Autoreset::SameStep
  int num_threads = 1;
  std::vector<int> cores;  // the cores this process may use (sched_getaffinity)
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
  uint64_t next_worker = 0;  // the caller's: which worker a send() wakes first
  Doorbell caller_bell;
  std::atomic<bool> stopping{false};
  std::atomic<bool> failed{false};
  std::mutex fail_mu;
  std::string failure;  // written once, before `failed` is set
};

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
    fail(timeout_message(call, std::chrono::duration<double>(Clock::now() - t0).count()));
    throw_if_failed();
  }
}

}  // namespace xlaunch::rl
