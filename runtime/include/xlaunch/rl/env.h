// An environment for xlaunch::EnvPool (env_pool.h): Gymnasium's Env in a few virtual calls, made to
// run on the pool's threads and to write straight into its batch tensors.
//
// The classic-control set of Gymnasium 1.4 is built in, under Gymnasium's ids: CartPole-v1,
// Acrobot-v1, MountainCar-v0, Pendulum-v1, MountainCarContinuous-v0 (dynamics, spaces, rewards, termination and time limits
// as Gymnasium's; tests/rl replays Gymnasium's own trajectories through them). A user's environment
// is a subclass of Env, given to the pool as a factory (or registered under an id), and runs in the
// pool unchanged.
//
// Threading: the pool calls one Env from one thread at a time (any of its threads, one after the
// other), so an Env needs no locks of its own; different Envs run concurrently, so they must not
// share mutable state.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "xlaunch/rng.h"

namespace xlaunch::rl {

// Gymnasium's Discrete(n) (actions 0..n-1, one int64 per environment) or Box(low, high) of float32
// (observations, and continuous actions), flat: `shape` is the tensor shape of one environment's
// element, low/high have one bound per element (+-infinity where Gymnasium has none).
struct Space {
  enum class Kind { Discrete, Box };
  Kind kind = Kind::Box;
  int64_t n = 0;                // Discrete: the number of actions
  std::vector<int64_t> shape;   // Box: the element shape, e.g. {4}; Discrete: {} (a scalar)
  std::vector<float> low, high; // Box: per element

  static Space discrete(int64_t n);
  static Space box(std::vector<float> low, std::vector<float> high);  // shape {low.size()}
  // The number of values one environment's element holds (1 for Discrete).
  int64_t numel() const;
  // "Discrete(2)", "Box(3,) [-1, 1]..." for messages.
  std::string describe() const;
};

// What the pool needs to know about an environment, fixed for its lifetime.
struct EnvSpec {
  std::string id;            // e.g. "CartPole-v1"; a user's environment names itself
  Space observation_space;   // always a Box (float32)
  Space action_space;        // Discrete or Box
  // Gymnasium's TimeLimit: an episode that reaches this many steps without terminating is
  // truncated (the pool counts; the Env need not). 0: no limit.
  int64_t max_episode_steps = 0;
};

// The per-environment random generator (rng.h): the pool seeds each Env's with env_seed(seed,
// index), so a run is the same whatever the number of threads.
using xlaunch::Rng;

// The seed of environment `index` of a pool seeded with `seed`: mix_seed(seed, index) (rng.h), so
// pools on different ranks seeded differently share no environment seed.
uint64_t env_seed(uint64_t seed, int64_t index);

// One step's outcome apart from the observation. `truncated`: the environment itself cut the
// episode short (the pool's time limit is counted apart, in addition).
struct StepResult {
  double reward = 0;
  bool terminated = false;
  bool truncated = false;
};

// One environment's action, as the pool hands it over: `discrete` for a Discrete action space
// (already checked to be in 0..n-1), else `box` points at action_space.numel() floats (checked to be
// finite; an Env clips to its bounds as Gymnasium's does, e.g. Pendulum).
struct Action {
  int64_t discrete = 0;
  const float* box = nullptr;
};

class Env {
 public:
  virtual ~Env() = default;
  virtual const EnvSpec& spec() const = 0;
  // Starts a new episode: draws the initial state from `rng` and writes the first observation into
  // obs (observation_space.numel() floats).
  virtual void reset(Rng& rng, float* obs) = 0;
  // Steps the episode with `action` and writes the next observation into obs. May throw: the pool
  // then fails the batch with a message naming this environment's index, id and step.
  virtual StepResult step(const Action& action, Rng& rng, float* obs) = 0;
};

using EnvFactory = std::function<std::unique_ptr<Env>()>;

// The registry of environment ids: one row per environment, read by make_env, the pool and the docs.
// The classic-control set registers itself. Registering an id twice throws UsageError.
void register_env(const std::string& id, EnvFactory factory);
// A new environment of that id; UsageError naming the registered ids when there is none.
std::unique_ptr<Env> make_env(const std::string& id);
std::vector<std::string> registered_envs();

}  // namespace xlaunch::rl
