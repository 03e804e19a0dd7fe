// Acrobot-v1: gymnasium/envs/classic_control/acrobot.py (Gymnasium 1.4), transcribed. The system is
// chaotic: every expression keeps the order of Gymnasium's, and x**2 is libm's pow (classic_control.h).
#include <algorithm>
#include <cmath>

#include "rl/classic_control.h"

namespace xlaunch::rl {

namespace {

const double pi = M_PI;
const double kDt = 0.2;
const double kMaxVel1 = 4 * pi;
const double kMaxVel2 = 9 * pi;
const double kTorque[3] = {-1.0, 0.0, 1.0};

EnvSpec make_spec() {
  const float v1 = static_cast<float>(kMaxVel1), v2 = static_cast<float>(kMaxVel2);
  EnvSpec s;
  s.id = "Acrobot-v1";
  s.observation_space = Space::box({-1, -1, -1, -1, -v1, -v2}, {1, 1, 1, 1, v1, v2});
  s.action_space = Space::discrete(3);
  s.max_episode_steps = 500;
  return s;
}

// AcrobotEnv._dsdt with book_or_nips = "book": the derivative of (theta1, theta2, dtheta1,
// dtheta2) under torque a (the augmented state's fifth element, whose derivative is 0).
void dsdt(const double* y, double* dy) {
  const double m1 = 1.0, m2 = 1.0, l1 = 1.0, lc1 = 0.5, lc2 = 0.5, I1 = 1.0, I2 = 1.0, g = 9.8;
  const double a = y[4];
  const double theta1 = y[0], theta2 = y[1], dtheta1 = y[2], dtheta2 = y[3];
  const double d1 = m1 * libm_square(lc1) +
                    m2 * (libm_square(l1) + libm_square(lc2) + 2 * l1 * lc2 * std::cos(theta2)) + I1 + I2;
  const double d2 = m2 * (libm_square(lc2) + l1 * lc2 * std::cos(theta2)) + I2;
  const double phi2 = m2 * lc2 * g * std::cos(theta1 + theta2 - pi / 2.0);
  const double phi1 = -m2 * l1 * lc2 * libm_square(dtheta2) * std::sin(theta2) -
                      2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * std::sin(theta2) +
                      (m1 * lc1 + m2 * l1) * g * std::cos(theta1 - pi / 2) + phi2;
  const double ddtheta2 =
      (a + d2 / d1 * phi1 - m2 * l1 * lc2 * libm_square(dtheta1) * std::sin(theta2) - phi2) /
      (m2 * libm_square(lc2) + I2 - libm_square(d2) / d1);
  const double ddtheta1 = -(d2 * ddtheta2 + phi1) / d1;
  dy[0] = dtheta1, dy[1] = dtheta2, dy[2] = ddtheta1, dy[3] = ddtheta2, dy[4] = 0.0;
}

// Gymnasium's wrap and bound.
double wrap(double x, double m, double M) {
  const double diff = M - m;
  while (x > M) x = x - diff;
  while (x < m) x = x + diff;
  return x;
}
double bound(double x, double m, double M) { return std::min(std::max(x, m), M); }

}  // namespace

const EnvSpec& Acrobot::spec() const {
  static const EnvSpec spec = make_spec();
  return spec;
}

void Acrobot::reset(Rng& rng, float* obs) {
  for (double& v : s_) v = static_cast<float>(rng.uniform(-0.1, 0.1));
  observe(obs);
}

StepResult Acrobot::step(const Action& action, Rng& /*rng*/, float* obs) {
  // rk4(self._dsdt, s_augmented, [0, dt]): one step, elementwise over the 5 augmented values.
  const double dt = kDt, dt2 = dt / 2.0;
  double y0[5] = {s_[0], s_[1], s_[2], s_[3], kTorque[action.discrete]};
  double k1[5], k2[5], k3[5], k4[5], y[5];
  dsdt(y0, k1);
  for (int i = 0; i < 5; ++i) y[i] = y0[i] + dt2 * k1[i];
  dsdt(y, k2);
  for (int i = 0; i < 5; ++i) y[i] = y0[i] + dt2 * k2[i];
  dsdt(y, k3);
  for (int i = 0; i < 5; ++i) y[i] = y0[i] + dt * k3[i];
  dsdt(y, k4);
  for (int i = 0; i < 4; ++i) y[i] = y0[i] + dt / 6.0 * (k1[i] + 2 * k2[i] + 2 * k3[i] + k4[i]);

  s_[0] = wrap(y[0], -pi, pi);
  s_[1] = wrap(y[1], -pi, pi);
  s_[2] = bound(y[2], -kMaxVel1, kMaxVel1);
  s_[3] = bound(y[3], -kMaxVel2, kMaxVel2);
  StepResult r;
  r.terminated = -std::cos(s_[0]) - std::cos(s_[1] + s_[0]) > 1.0;
  r.reward = r.terminated ? 0.0 : -1.0;
  observe(obs);
  return r;
}

void Acrobot::observe(float* obs) const {
  obs[0] = static_cast<float>(std::cos(s_[0]));
  obs[1] = static_cast<float>(std::sin(s_[0]));
  obs[2] = static_cast<float>(std::cos(s_[1]));
  obs[3] = static_cast<float>(std::sin(s_[1]));
  obs[4] = static_cast<float>(s_[2]);
  obs[5] = static_cast<float>(s_[3]);
}

}  // namespace xlaunch::rl
