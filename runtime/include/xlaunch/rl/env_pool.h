// xlaunch::rl::EnvPool: N environments (env.h) stepped on a pool of threads, EnvPool's model
// (Weng et al. 2022) in LibTorch tensors.
//
// Synchronous loop (batch_size == num_envs, the default):
//
//   EnvPoolOptions o;
//   o.env_id = "CartPole-v1"; o.num_envs = 64; o.seed = rank;
//   EnvPool pool(o);
//   EnvBatch b = pool.reset();
//   for (;;) b = pool.step(policy(b.obs));            // rows in environment order
//
// Asynchronous loop (batch_size < num_envs): recv() hands back the first batch_size environments
// that finished their step, while the others keep stepping, so the policy computes on one part of
// the pool while the rest steps:
//
//   o.batch_size = 32;                                  // of o.num_envs = 64
//   EnvPool pool(o);
//   pool.async_reset();                                // every environment starts an episode
//   for (;;) { EnvBatch b = pool.recv(); pool.send(policy(b.obs), b.env_id); }
//
// Each batch's tensors are written by the pool's threads straight into preallocated batch
// tensors (pinned host memory, then one asynchronous copy on a side stream, when `device` is a
// GPU; the training thread's stream waits for it without a host synchronisation, as for the
// loader's batches). The training thread copies nothing; each batch returned is new storage, so a
// rollout may keep it.
//
// Automatic reset, as Gymnasium's vector environments (autoreset_mode):
//   NextStep (Gymnasium's and EnvPool's default): the step that ends an episode returns its last
//     observation; the environment's next step ignores its action, starts a new episode and
//     returns its first observation with reward 0 and terminated = truncated = false.
//   SameStep: the step that ends an episode returns the new episode's first observation in `obs`,
//     and its last one in `final_obs` (the row for bootstrapping a truncated episode's value).
//
// Reproducible: environment i is seeded with env_seed(seed, i) and owns its generator, so each
// environment's trajectory depends on the seed and its own actions only, never on num_threads or
// on which thread stepped it.
//
// Measured: the training thread's wait in reset/step/recv counts as the step's data wait in the
// utilization report (as the loader's wait for a batch does).
//
// Bad input throws UsageError naming the environment index, its id, its step and what was
// expected: an action batch of the wrong shape or dtype, a Discrete action out of 0..n-1, a
// non-finite Box action, send() of an environment already in flight, recv() with fewer than
// batch_size environments in flight. An Env that throws fails the batch (the message names it)
// and the pool: every later call throws that error. No wait is unbounded: a step that makes no
// progress for timeout_s throws, naming the environments in flight and for how long. (One thing
// cannot be bounded from inside: in step() the calling thread steps the first chunk of
// environments itself, and an environment stuck there holds it; in a job, the other ranks' next
// collective then names this rank.) The threads never outlive the pool: its destructor stops them
// after the environments' current steps, and says on stderr which environments it still waits for
// after timeout_s.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "xlaunch/rl/env.h"

namespace xlaunch::rl {

enum class Autoreset { NextStep, SameStep };

// How the pool steps its environments: Threads (Env objects on the pool's threads, this header), or
// Tensor (every environment at once as tensors on `device`: TensorEnv, tensor_env.h; a built-in
// env_id, synchronous only, no threads of its own).
enum class EnvBackend { Threads, Tensor };

struct EnvPoolOptions {
  std::string env_id;            // a registered id (env.h); or set `factory`
  EnvFactory factory;            // a user's environment: called num_envs times, on the caller's thread
  int64_t num_envs = 1;
  int64_t batch_size = 0;        // 0: num_envs (synchronous); else 1..num_envs, for send/recv
  // Threads that step the environments. 0: this rank's share of the machine's cores (the cores this
  // process may run on, divided among the ranks on this machine), at most num_envs.
  int num_threads = 0;
  // >= 0: pin thread t to core (thread_affinity_offset + t) modulo the cores this process may use.
  int thread_affinity_offset = -1;
  uint64_t seed = 0;
  c10::Device device = c10::Device(c10::kCPU);
  Autoreset autoreset = Autoreset::NextStep;
  // The longest a reset/step/recv waits for the pool's threads to make progress. 0: XLAUNCH_TIMEOUT_S
  // (600 when unset; 0 there too means wait forever).
  double timeout_s = 0;
  EnvBackend backend = EnvBackend::Threads;
};

// One finished episode (Gymnasium's RecordEpisodeStatistics).
struct Episode {
  int64_t env_id = 0;
  double ret = 0;       // the sum of its rewards
  int64_t length = 0;   // its steps
};

// One batch of B = batch_size rows, on the pool's device.
struct EnvBatch {
  at::Tensor obs;         // [B, *observation shape] float32
  at::Tensor reward;      // [B] float32
  at::Tensor terminated;  // [B] bool
  at::Tensor truncated;   // [B] bool
  at::Tensor env_id;      // [B] int64: which environment each row is (0..num_envs-1)
  at::Tensor final_obs;   // Autoreset::SameStep only: [B, *observation shape], the ended episode's
                          // last observation in rows where terminated | truncated (else zeros)
  std::vector<Episode> episodes;  // the episodes that ended in this batch, in row order
  // The tensor backend (tensor_env.h) also gives them on the device, one value per row: the return
  // ([B] float32) and length ([B] int64) of the episode that ended in that row, 0 where none did.
  // Undefined for the thread pool, whose `episodes` always holds them.
  at::Tensor episode_return;
  at::Tensor episode_length;
};

class TensorEnv;

class EnvPool {
 public:
  explicit EnvPool(EnvPoolOptions options);
  ~EnvPool();
  EnvPool(const EnvPool&) = delete;
  EnvPool& operator=(const EnvPool&) = delete;

  const EnvSpec& spec() const;
  int64_t num_envs() const;
  int64_t batch_size() const;
  int num_threads() const;

  // Synchronous (batch_size == num_envs; else UsageError saying to use send/recv).
  // reset(): every environment starts a new episode; rows in environment order, reward 0.
  EnvBatch reset();
  // step(actions): actions [num_envs] integer (Discrete) or [num_envs, *action shape] float
  // (Box), on any device; every environment steps once; rows in environment order.
  EnvBatch step(const at::Tensor& actions);

  // Asynchronous (any batch_size).
  // async_reset(): every environment starts a new episode; recv() returns their first observations.
  void async_reset();
  // send(actions, env_ids): environments env_ids (int64 [K]) step with actions (K rows).
  void send(const at::Tensor& actions, const at::Tensor& env_ids);
  // recv(): the first batch_size environments whose step (or reset) finished, in the order they
  // finished; env_id says which they are.
  EnvBatch recv();

  // Environment steps taken so far (each environment's step counts once; resets do not).
  int64_t env_steps() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<TensorEnv> tensor_;  // EnvBackend::Tensor (then impl_ is null)
};

}  // namespace xlaunch::rl
