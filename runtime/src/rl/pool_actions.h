// Private to the environment pool: checking the actions of a step() or send() against the action
// space, and the environment ids of a send(), before anything is stepped (so a UsageError leaves
// the pool as it was), and storing each action where its environment's thread reads it.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "xlaunch/rl/env.h"

namespace xlaunch::rl::detail {

// The action of each environment, by environment index: what Action (env.h) points at.
struct ActionSlots {
  ActionSlots(const Space& space, int64_t num_envs);
  Action of(int64_t env) const;

  int64_t numel;                  // Box: floats per action
  std::vector<int64_t> discrete;  // Discrete: one per environment
  std::vector<float> box;         // Box: numel per environment
};

// Names an environment in messages, e.g. "environment 3 (CartPole-v1, its step 12)".
using NameEnv = std::function<std::string(int64_t env)>;

// "[4, 1]": a tensor's sizes, for messages (the pool's and TensorEnv's).
std::string shape_of(at::IntArrayRef sizes);

// Stores actions[r] as the action of environment env_ids[r], r < k, after checking them all:
// Discrete wants an integer tensor of shape [k] or [k, 1] with values in 0..n-1; Box a float32 or
// float64 tensor of shape [k, *shape] with finite values (converted to float32). `actions` is on
// the CPU and contiguous. UsageError naming `call` (e.g. "EnvPool.step()"), the environment (by
// `name`) and what was expected.
void store_actions(const Space& space, const at::Tensor& actions, const int64_t* env_ids, int64_t k,
                   const std::string& call, const NameEnv& name, ActionSlots& slots);

// send()'s environment ids: each in 0..num_envs-1, at most once, and not in flight (in_flight[i]
// != 0). UsageError naming the environment and the fix. `seen`: num_envs zeros, left zeros (the
// duplicate check in one pass).
void check_send_ids(const int64_t* env_ids, int64_t k, int64_t num_envs, const std::vector<uint8_t>& in_flight,
                    const std::string& call, const NameEnv& name, std::vector<uint8_t>& seen);

}  // namespace xlaunch::rl::detail
