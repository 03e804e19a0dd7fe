// xlaunch::rl::TensorEnv: N environments whose state is a few tensors on one device, stepped all
// at once, the way Isaac Gym and Brax simulate: no per-environment call, no thread hand-over, and on
// a GPU no host round trip (observations, rewards and flags stay where the policy runs).
//
//   TensorEnvOptions o;
//   o.env_id = "CartPole-v1"; o.num_envs = 4096; o.seed = rank; o.device = torch::kCUDA;
//   TensorEnv env(o);
//   EnvBatch b = env.reset();
//   for (;;) b = env.step(policy(b.obs));   // the same EnvBatch as rl::EnvPool's
//
// or, through the pool's interface, EnvPoolOptions::backend = EnvBackend::Tensor.
//
// Built in: Gymnasium 1.4's classic-control set (CartPole-v1, Acrobot-v1, MountainCar-v0,
// MountainCarContinuous-v0, Pendulum-v1) in float32, each step one fused loop over the rows (one
// CPU pass on the intra-op threads; one CUDA kernel on a GPU). A user's environment is a
// TensorEnvironment (below) written in tensor operations, given as `factory`; the time limit,
// automatic reset and episode statistics around it are TensorEnv's, with masks, never a host branch.
//
// Semantics: rl::EnvPool's (env_pool.h): Autoreset NextStep or SameStep (with final_obs), Gymnasium's
// TimeLimit from EnvSpec::max_episode_steps, rows in environment order, each batch new storage.
// The episodes that ended in a step are in the batch's episode_return and episode_length tensors
// (on the device; read them when logging); `episodes` (the host list) is filled on the CPU only,
// where reading them costs nothing.
//
// Reproducible: environment i draws from the counter-based generator keyed by env_seed(seed, i)
// (rows::Draws, TensorRng), so its trajectory depends on the seed, its index and its own actions,
// never on num_envs or the device.
//
// Bad input throws UsageError naming the cause: an unknown id (naming the built-in ones), an action
// batch of the wrong shape or dtype. On the CPU each action is checked before the step (a Discrete
// action outside 0..n-1, a non-finite Box action) and the step is not taken. On a GPU that check
// would be a host synchronisation every step, so a bad action is counted on the device, stepped
// clamped into range, and reported by the next check_actions() or episode read (finished()).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "xlaunch/rl/env.h"
#include "xlaunch/rl/env_pool.h"

namespace xlaunch::rl {

namespace detail {
struct TensorEnvAccess;
}

// The generator of a tensor environment's resets: one counter-based stream per environment (draw c
// of environment i is splitmix64's output at env_seed(seed, i) + c * golden gamma), so draws for
// every environment are made at once and each environment's are its own.
class TensorRng {
 public:
  TensorRng(int64_t num_envs, uint64_t seed, c10::Device device);
  // [N, k] float32: uniform in [low, high) (computed in double, then rounded); each environment
  // where `mask` ([N] bool) is true uses up k draws, the others none (their rows are still filled,
  // from draws they will make later, so use torch::where(mask, new, old)).
  at::Tensor uniform(const at::Tensor& mask, int64_t k, double low, double high);
  // The generator's state: one key and one count of draws made per environment ([N] int64).
  at::Tensor& keys() { return keys_; }
  at::Tensor& counters() { return counters_; }

 private:
  at::Tensor keys_, counters_;
};

// One step of all N environments: [N] float32 reward, [N] bool terminated; truncated: [N] bool
// when the environment itself cuts episodes short, or undefined (the time limit is TensorEnv's).
struct TensorStep {
  at::Tensor reward;
  at::Tensor terminated;
  at::Tensor truncated;
};

// A user's environment, for N environments at once (docs/rl.md has a complete one):
class TensorEnvironment {
 public:
  virtual ~TensorEnvironment() = default;
  // Spaces and time limit, as for Env; the observation space is a float32 Box.
  virtual const EnvSpec& spec() const = 0;
  // Makes the state of num_envs environments on `device` (called once, before anything else).
  virtual void allocate(int64_t num_envs, c10::Device device) = 0;
  // Starts new episodes in the rows where mask ([N] bool) is true; leaves the others unchanged.
  virtual void reset(const at::Tensor& mask, TensorRng& rng) = 0;
  // Advances every row by `actions` ([N] int64 for a Discrete space, else [N, *action shape]
  // float32, already checked). Rows whose episode ended are stepped too and then reset: their
  // results are discarded, so they need no special case.
  virtual TensorStep step(const at::Tensor& actions) = 0;
  // [N, *observation shape] float32 of the current state, in new storage (the batch keeps it).
  virtual at::Tensor observe() = 0;
};

using TensorEnvFactory = std::function<std::unique_ptr<TensorEnvironment>()>;

struct TensorEnvOptions {
  std::string env_id;           // a built-in id (tensor_env_ids()); or set `factory`
  TensorEnvFactory factory;     // a user's environment
  int64_t num_envs = 1;
  uint64_t seed = 0;
  c10::Device device = c10::Device(c10::kCPU);
  Autoreset autoreset = Autoreset::NextStep;
};

// One episode-statistics read (finished()): the episodes that ended since the last read.
struct FinishedEpisodes {
  std::vector<Episode> episodes;  // in the order they ended (by step, then environment)
  int64_t dropped = 0;            // ended but not kept: more than the log holds between two reads
};

class TensorEnv {
 public:
  explicit TensorEnv(TensorEnvOptions options);
  ~TensorEnv();
  TensorEnv(const TensorEnv&) = delete;
  TensorEnv& operator=(const TensorEnv&) = delete;

  const EnvSpec& spec() const;
  int64_t num_envs() const;
  c10::Device device() const;

  // Every environment starts a new episode; rows in environment order, reward 0.
  EnvBatch reset();
  // Every environment steps once (actions as EnvPool::step takes them, on any device).
  EnvBatch step(const at::Tensor& actions);
  // Environment steps taken so far (each step of each environment counts once; resets do not).
  int64_t env_steps() const;

  // The episodes that ended since the last call, kept on the device (a log of 4 x num_envs, at
  // least 4096) and read here in one copy: call it when logging. Also reports bad GPU actions.
  FinishedEpisodes finished();
  // On a GPU: throws UsageError if any step since the last check had a bad action (one read of a
  // device counter). On the CPU actions are checked before each step; this does nothing.
  void check_actions();

  // Built in: which step runs ("fused" for the built-in environments, "tensor operations" for a
  // user's), for logs and tests.
  const char* stepping() const;

 private:
  friend struct detail::TensorEnvAccess;
  TensorEnv(TensorEnvOptions options, bool generic, bool device_like);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The ids of the built-in tensor environments.
std::vector<std::string> tensor_env_ids();

}  // namespace xlaunch::rl
