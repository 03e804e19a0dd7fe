// Pendulum-v1: gymnasium/envs/classic_control/pendulum.py (Gymnasium 1.4, g = 10), transcribed.
// The action is a float32 and numpy keeps the terms made of it alone in float32 (3.0 * u, and
// 0.001 * u**2: a Python float beside a float32 scalar stays float32), so they are float here too.
#include <algorithm>
#include <cmath>

#include "rl/classic_control.h"

namespace xlaunch::rl {

namespace {

const double kMaxSpeed = 8;
const double kMaxTorque = 2.0;
const double kDt = 0.05;
const double kG = 10.0;
const double kM = 1.0;
const double kL = 1.0;

EnvSpec make_spec() {
  EnvSpec s;
  s.id = "Pendulum-v1";
  s.observation_space = Space::box({-1, -1, -8}, {1, 1, 8});
  s.action_space = Space::box({-2}, {2});
  s.max_episode_steps = 200;
  return s;
}

// ((x + pi) % (2 * pi)) - pi with numpy's (Python's) floored modulo: fmod, moved into the sign of
// the divisor.
double angle_normalize(double x) {
  const double b = 2 * M_PI;
  double mod = std::fmod(x + M_PI, b);
  if (mod != 0) {
    if ((b < 0) != (mod < 0)) mod += b;
  } else {
    mod = std::copysign(0.0, b);
  }
  return mod - M_PI;
}

}  // namespace

const EnvSpec& Pendulum::spec() const {
  static const EnvSpec spec = make_spec();
  return spec;
}

void Pendulum::reset(Rng& rng, float* obs) {
  s_[0] = rng.uniform(-M_PI, M_PI);
  s_[1] = rng.uniform(-1.0, 1.0);
  observe(obs);
}

StepResult Pendulum::step(const Action& action, Rng& /*rng*/, float* obs) {
  const double th = s_[0], thdot = s_[1];
  const float u = std::clamp(action.box[0], static_cast<float>(-kMaxTorque), static_cast<float>(kMaxTorque));
  const double costs = libm_square(angle_normalize(th)) + 0.1 * libm_square(thdot) +
                       static_cast<double>(0.001f * libm_square(u));

  double newthdot = thdot + (3 * kG / (2 * kL) * std::sin(th) + static_cast<double>(
                                 static_cast<float>(3.0 / (kM * libm_square(kL))) * u)) * kDt;
  newthdot = std::clamp(newthdot, -kMaxSpeed, kMaxSpeed);
  const double newth = th + newthdot * kDt;
  s_[0] = newth, s_[1] = newthdot;

  StepResult r;
  r.reward = -costs;
  observe(obs);
  return r;
}

void Pendulum::observe(float* obs) const {
  obs[0] = static_cast<float>(std::cos(s_[0]));
  obs[1] = static_cast<float>(std::sin(s_[0]));
  obs[2] = static_cast<float>(s_[1]);
}

}  // namespace xlaunch::rl
