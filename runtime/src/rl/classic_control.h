// Gymnasium 1.4's classic-control environments (env.h registers them under Gymnasium's ids).
// Internal: the concrete classes are declared here for the registry and for tests/rl, which put
// Gymnasium's initial states into them (set_state) to replay Gymnasium's own trajectories.
//
// Each step is Gymnasium's Python/numpy code transcribed: double precision, the same operations in
// the same order, the same libm functions (numpy's float64 sin/cos and x**2 call glibc's cos, sin
// and pow on a scalar), and float32 exactly where numpy computes in float32 (Pendulum's action
// terms). Acrobot is chaotic, so one ulp anywhere would grow into a different trajectory within
// a few hundred steps. The sources are compiled with -ffp-contract=off (envs.cmake): a fused
// multiply-add is one rounding where numpy has two.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "xlaunch/rl/env.h"

namespace xlaunch::rl {

// x**2 as numpy and Python compute it: libm's pow(x, 2), which is not always x*x rounded (glibc's
// pow differs from x*x by an ulp for about 1 argument in 1000). Compilers rewrite pow(x, 2.0) as
// x*x, so the exponent is read from a volatile and stays unknown to them.
inline double libm_square(double x) {
  volatile double two = 2.0;
  return std::pow(x, two);
}
// The float32 x**2 of numpy (powf), for Pendulum's action cost.
inline float libm_square(float x) {
  volatile float two = 2.0f;
  return std::pow(x, two);
}

// What tests need beyond Env: the physical state as Gymnasium's env.unwrapped.state holds it.
class ClassicControl : public Env {
 public:
  virtual std::vector<double> state() const = 0;
  // Starts an episode at `state` (as reset does, without drawing). UsageError on a wrong size.
  virtual void set_state(const std::vector<double>& state) = 0;
  // The observation of the current state (what reset and step write).
  virtual void observe(float* obs) const = 0;
};

// The UsageError of set_state given `got` values where `env` has `want`.
[[noreturn]] void throw_state_size(const std::string& env, size_t want, size_t got);

// They keep their state as N doubles: state() and set_state() for all of them.
template <size_t N>
class ClassicControlOf : public ClassicControl {
 public:
  std::vector<double> state() const override { return {s_, s_ + N}; }
  void set_state(const std::vector<double>& state) override {
    if (state.size() != N) throw_state_size(spec().id, N, state.size());
    std::copy(state.begin(), state.end(), s_);
    started();
  }

 protected:
  virtual void started() {}  // what else a new episode resets (CartPole's termination)
  double s_[N] = {};
};

// CartPole-v1: state (x, x_dot, theta, theta_dot), Euler integration, reward 1 per step including
// the terminating one (0 for steps taken after termination, as Gymnasium).
class CartPole final : public ClassicControlOf<4> {
 public:
  const EnvSpec& spec() const override;
  void reset(Rng& rng, float* obs) override;
  StepResult step(const Action& action, Rng& rng, float* obs) override;
  void observe(float* obs) const override;

 private:
  void started() override { terminated_ = false; }
  bool terminated_ = false;  // Gymnasium's steps_beyond_terminated is not None
};

// Acrobot-v1: state (theta1, theta2, dtheta1, dtheta2), the 'book' dynamics, one rk4 step of
// dt = 0.2, no torque noise. Reset draws the state as float32 values, as Gymnasium does.
class Acrobot final : public ClassicControlOf<4> {
 public:
  const EnvSpec& spec() const override;
  void reset(Rng& rng, float* obs) override;
  StepResult step(const Action& action, Rng& rng, float* obs) override;
  void observe(float* obs) const override;
};

// MountainCar-v0: state (position, velocity), reward -1 per step.
class MountainCar final : public ClassicControlOf<2> {
 public:
  const EnvSpec& spec() const override;
  void reset(Rng& rng, float* obs) override;
  StepResult step(const Action& action, Rng& rng, float* obs) override;
  void observe(float* obs) const override;
};

// MountainCarContinuous-v0: state (position, velocity); float64 after a reset and float32 after a
// step, as Gymnasium stores it (its step's arithmetic depends on which: the .cpp says how).
class MountainCarContinuous final : public ClassicControlOf<2> {
 public:
  const EnvSpec& spec() const override;
  void reset(Rng& rng, float* obs) override;
  StepResult step(const Action& action, Rng& rng, float* obs) override;
  void observe(float* obs) const override;

 private:
  void started() override { state_f32_ = false; }
  bool state_f32_ = false;
};

// Pendulum-v1 (g = 10): state (theta, theta_dot), the action clipped to [-2, 2], never terminates.
class Pendulum final : public ClassicControlOf<2> {
 public:
  const EnvSpec& spec() const override;
  void reset(Rng& rng, float* obs) override;
  StepResult step(const Action& action, Rng& rng, float* obs) override;
  void observe(float* obs) const override;
};

}  // namespace xlaunch::rl
