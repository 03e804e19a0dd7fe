// Environments for the pool's tests, and the single-process reference: the same environments
// stepped one by one in a plain loop, with the pool's contract (env_pool.h: seeds, time limit,
// autoreset, episode statistics) spelled out in the simplest way.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <memory>
#include <vector>

#include "xlaunch/rl/env_pool.h"

// Found by argument-dependent lookup: in the namespace of Episode.
namespace xlaunch::rl {
inline bool operator==(const Episode& a, const Episode& b) {
  return a.env_id == b.env_id && a.ret == b.ret && a.length == b.length;
}
inline std::ostream& operator<<(std::ostream& s, const Episode& e) {
  return s << "{env " << e.env_id << " return " << e.ret << " length " << e.length << '}';
}
}  // namespace xlaunch::rl

namespace xlaunch::test {

using rl::Action;
using rl::Env;
using rl::EnvSpec;
using rl::Rng;
using rl::Space;
using rl::StepResult;

// Discrete(3) actions, three observations: a walk that uses its generator in reset and step; its
// episodes terminate at random (about one step in six) or are truncated by the time limit (9).
class WalkEnv : public Env {
 public:
  WalkEnv() {
    spec_.id = "Walk-v0";
    spec_.observation_space = Space::box({-INFINITY, 0.f, 0.f}, {INFINITY, 1.f, 2.f});
    spec_.action_space = Space::discrete(3);
    spec_.max_episode_steps = 9;
  }
  const EnvSpec& spec() const override { return spec_; }
  void reset(Rng& rng, float* obs) override {
    x_ = rng.uniform(-1, 1);
    obs[0] = static_cast<float>(x_);
    obs[1] = static_cast<float>(rng.uniform(0, 1));
    obs[2] = 0;
  }
  StepResult step(const Action& a, Rng& rng, float* obs) override {
    x_ += (a.discrete - 1) * 0.5 + rng.uniform(-0.1, 0.1);
    const double coin = rng.uniform(0, 1);
    obs[0] = static_cast<float>(x_);
    obs[1] = static_cast<float>(coin);
    obs[2] = static_cast<float>(a.discrete);
    return {x_ + a.discrete, coin < 0.17, false};
  }

 private:
  EnvSpec spec_;
  double x_ = 0;
};

// Box(2) actions in [-1, 1], two observations: its episodes terminate when it drifts out of
// [-1.2, 1.2] or are truncated by the environment itself (about one step in twenty); no time limit.
class DriftEnv : public Env {
 public:
  DriftEnv() {
    spec_.id = "Drift-v0";
    spec_.observation_space = Space::box({-2.f, -2.f}, {2.f, 2.f});
    spec_.action_space = Space::box({-1.f, -1.f}, {1.f, 1.f});
  }
  const EnvSpec& spec() const override { return spec_; }
  void reset(Rng& rng, float* obs) override {
    for (int j = 0; j < 2; ++j) obs[j] = x_[j] = static_cast<float>(rng.uniform(-0.5, 0.5));
  }
  StepResult step(const Action& a, Rng& rng, float* obs) override {
    for (int j = 0; j < 2; ++j) {
      const float u = std::fmin(1.f, std::fmax(-1.f, a.box[j]));
      x_[j] += 0.3f * u + static_cast<float>(rng.uniform(-0.4, 0.4));
      obs[j] = x_[j];
    }
    const bool out = std::fabs(x_[0]) > 1.2f || std::fabs(x_[1]) > 1.2f;
    return {-std::fabs(x_[0]) - std::fabs(x_[1]), out, rng.uniform(0, 1) < 0.05};
  }

 private:
  EnvSpec spec_;
  float x_[2] = {0, 0};
};

// One row of a batch, as plain values.
struct Row {
  std::vector<float> obs, final_obs;  // final_obs: SameStep only
  float reward = 0;
  bool terminated = false, truncated = false;
  bool operator==(const Row& o) const {
    return obs == o.obs && final_obs == o.final_obs && reward == o.reward && terminated == o.terminated &&
           truncated == o.truncated;
  }
};

inline std::ostream& operator<<(std::ostream& s, const Row& r) {
  s << "{obs";
  for (float v : r.obs) s << ' ' << v;
  s << " reward " << r.reward << " terminated " << r.terminated << " truncated " << r.truncated << '}';
  return s;
}

inline Row row_of(const rl::EnvBatch& b, int64_t r) {
  Row row;
  const at::Tensor obs = b.obs[r].reshape({-1}).cpu();
  row.obs.assign(obs.data_ptr<float>(), obs.data_ptr<float>() + obs.numel());
  if (b.final_obs.defined()) {
    const at::Tensor f = b.final_obs[r].reshape({-1}).cpu();
    row.final_obs.assign(f.data_ptr<float>(), f.data_ptr<float>() + f.numel());
  }
  row.reward = b.reward[r].item<float>();
  row.terminated = b.terminated[r].item<bool>();
  row.truncated = b.truncated[r].item<bool>();
  return row;
}

// Environment `index` of a pool seeded with `seed`, stepped by hand.
class Reference {
 public:
  Reference(const rl::EnvFactory& factory, uint64_t seed, int64_t index, rl::Autoreset mode)
      : env_(factory()), rng_(rl::env_seed(seed, index)), index_(index), same_step_(mode == rl::Autoreset::SameStep) {
    numel_ = env_->spec().observation_space.numel();
  }

  Row reset() {
    Row r = fresh();
    env_->reset(rng_, r.obs.data());
    ret_ = 0;
    len_ = 0;
    ended_ = false;
    last_ = r.obs;
    return r;
  }

  Row step(const Action& a) {
    if (ended_) {  // NextStep: this step starts the next episode and ignores the action
      Row r = reset();
      return r;
    }
    Row r = fresh();
    const StepResult s = env_->step(a, rng_, r.obs.data());
    ++len_;
    ret_ += s.reward;
    r.reward = static_cast<float>(s.reward);
    r.terminated = s.terminated;
    const int64_t limit = env_->spec().max_episode_steps;
    r.truncated = s.truncated || (limit > 0 && len_ >= limit);
    if (r.terminated || r.truncated) {
      episodes.push_back({index_, ret_, len_});
      if (same_step_) {
        r.final_obs = r.obs;
        env_->reset(rng_, r.obs.data());
        ret_ = 0;
        len_ = 0;
      } else {
        ended_ = true;
      }
    }
    last_ = r.obs;
    return r;
  }

  const std::vector<float>& last_obs() const { return last_; }
  std::vector<rl::Episode> episodes;

 private:
  Row fresh() const {
    Row r;
    r.obs.assign(numel_, 0.f);
    if (same_step_) r.final_obs.assign(numel_, 0.f);
    return r;
  }

  std::unique_ptr<Env> env_;
  Rng rng_;
  int64_t index_;
  bool same_step_;
  int64_t numel_ = 0;
  double ret_ = 0;
  int64_t len_ = 0;
  bool ended_ = false;
  std::vector<float> last_;
};

// The message of the exception f() throws (E or derived); a test failure when it throws none.
template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "no exception was thrown";
  return "";
}

}  // namespace xlaunch::test
