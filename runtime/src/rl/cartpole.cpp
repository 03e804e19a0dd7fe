// CartPole-v1: gymnasium/envs/classic_control/cartpole.py (Gymnasium 1.4), transcribed.
#include <cmath>
#include <limits>

#include "rl/classic_control.h"

namespace xlaunch::rl {

namespace {

// Gymnasium's attributes, combined as its __init__ combines them (the same doubles).
const double kGravity = 9.8;
const double kMassCart = 1.0;
const double kMassPole = 0.1;
const double kTotalMass = kMassPole + kMassCart;
const double kLength = 0.5;  // half the pole's length
const double kPoleMassLength = kMassPole * kLength;
const double kForceMag = 10.0;
const double kTau = 0.02;
const double kThetaThreshold = 12 * 2 * M_PI / 360;
const double kXThreshold = 2.4;

EnvSpec make_spec() {
  const float inf = std::numeric_limits<float>::infinity();
  // float32 as Gymnasium's np.array(..., dtype=np.float32) rounds them.
  const float x = static_cast<float>(kXThreshold * 2), theta = static_cast<float>(kThetaThreshold * 2);
  EnvSpec s;
  s.id = "CartPole-v1";
  s.observation_space = Space::box({-x, -inf, -theta, -inf}, {x, inf, theta, inf});
  s.action_space = Space::discrete(2);
  s.max_episode_steps = 500;
  return s;
}

}  // namespace

const EnvSpec& CartPole::spec() const {
  static const EnvSpec spec = make_spec();
  return spec;
}

void CartPole::reset(Rng& rng, float* obs) {
  for (double& v : s_) v = rng.uniform(-0.05, 0.05);
  terminated_ = false;
  observe(obs);
}

StepResult CartPole::step(const Action& action, Rng& /*rng*/, float* obs) {
  double x = s_[0], x_dot = s_[1], theta = s_[2], theta_dot = s_[3];
  const double force = action.discrete == 1 ? kForceMag : -kForceMag;
  const double costheta = std::cos(theta);
  const double sintheta = std::sin(theta);
  // np.square is x*x, unlike **2.
  const double temp = (force + kPoleMassLength * (theta_dot * theta_dot) * sintheta) / kTotalMass;
  const double thetaacc = (kGravity * sintheta - costheta * temp) /
                          (kLength * (4.0 / 3.0 - kMassPole * (costheta * costheta) / kTotalMass));
  const double xacc = temp - kPoleMassLength * thetaacc * costheta / kTotalMass;
  x = x + kTau * x_dot;
  x_dot = x_dot + kTau * xacc;
  theta = theta + kTau * theta_dot;
  theta_dot = theta_dot + kTau * thetaacc;
  s_[0] = x, s_[1] = x_dot, s_[2] = theta, s_[3] = theta_dot;

  StepResult r;
  r.terminated = x < -kXThreshold || x > kXThreshold || theta < -kThetaThreshold || theta > kThetaThreshold;
  // 1 for every step up to and including the one that terminates; 0 for steps taken after it.
  r.reward = r.terminated && terminated_ ? 0.0 : 1.0;
  terminated_ = terminated_ || r.terminated;
  observe(obs);
  return r;
}

void CartPole::observe(float* obs) const {
  for (int i = 0; i < 4; ++i) obs[i] = static_cast<float>(s_[i]);
}

}  // namespace xlaunch::rl
