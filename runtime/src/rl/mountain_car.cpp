// MountainCar-v0: gymnasium/envs/classic_control/mountain_car.py (Gymnasium 1.4), transcribed.
#include <algorithm>
#include <cmath>

#include "rl/classic_control.h"

namespace xlaunch::rl {

namespace {

const double kMinPosition = -1.2;
const double kMaxPosition = 0.6;
const double kMaxSpeed = 0.07;
const double kGoalPosition = 0.5;
const double kGoalVelocity = 0;
const double kForce = 0.001;
const double kGravity = 0.0025;

EnvSpec make_spec() {
  EnvSpec s;
  s.id = "MountainCar-v0";
  s.observation_space = Space::box({static_cast<float>(kMinPosition), static_cast<float>(-kMaxSpeed)},
                                   {static_cast<float>(kMaxPosition), static_cast<float>(kMaxSpeed)});
  s.action_space = Space::discrete(3);
  s.max_episode_steps = 200;
  return s;
}

}  // namespace

const EnvSpec& MountainCar::spec() const {
  static const EnvSpec spec = make_spec();
  return spec;
}

void MountainCar::reset(Rng& rng, float* obs) {
  s_[0] = rng.uniform(-0.6, -0.4);
  s_[1] = 0;
  observe(obs);
}

StepResult MountainCar::step(const Action& action, Rng& /*rng*/, float* obs) {
  double position = s_[0], velocity = s_[1];
  velocity += static_cast<double>(action.discrete - 1) * kForce + std::cos(3 * position) * (-kGravity);
  velocity = std::clamp(velocity, -kMaxSpeed, kMaxSpeed);
  position += velocity;
  position = std::clamp(position, kMinPosition, kMaxPosition);
  if (position == kMinPosition && velocity < 0) velocity = 0;
  s_[0] = position, s_[1] = velocity;

  StepResult r;
  r.terminated = position >= kGoalPosition && velocity >= kGoalVelocity;
  r.reward = -1.0;
  observe(obs);
  return r;
}

void MountainCar::observe(float* obs) const {
  obs[0] = static_cast<float>(s_[0]);
  obs[1] = static_cast<float>(s_[1]);
}

}  // namespace xlaunch::rl
