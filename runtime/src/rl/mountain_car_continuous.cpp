// MountainCarContinuous-v0: gymnasium/envs/classic_control/continuous_mountain_car.py (Gymnasium
// 1.4), transcribed with numpy 2's scalar types. Its step mixes numpy float32 scalars (the action,
// and the state after the first step, which Gymnasium stores as float32), numpy float64 scalars (the
// state after a reset, a float64 array) and Python floats (the constants, math.cos's result), and
// numpy computes each operation in the type NEP 50 gives it: a Python float takes the numpy
// operand's type, float32 with float64 is float64. So each value here carries its type and each
// operation rounds as numpy's does.
#include <cmath>

#include "rl/classic_control.h"

namespace xlaunch::rl {

namespace {

// A scalar of Gymnasium's step: its value and its type.
struct Num {
  enum Kind { F32, F64, Py };
  double v;
  Kind k;
};

Num py(double v) { return {v, Num::Py}; }

// The type of a binary operation's result (NEP 50: a Python float is "weak").
Num::Kind kind(const Num& a, const Num& b) {
  if (a.k == b.k) return a.k;
  if (a.k == Num::Py) return b.k;
  if (b.k == Num::Py) return a.k;
  return Num::F64;  // float32 with float64
}

template <class F>
Num apply(const Num& a, const Num& b, F f) {
  const Num::Kind k = kind(a, b);
  if (k == Num::F32) return {static_cast<double>(f(static_cast<float>(a.v), static_cast<float>(b.v))), k};
  return {f(a.v, b.v), k};
}
Num add(const Num& a, const Num& b) { return apply(a, b, [](auto x, auto y) { return x + y; }); }
Num sub(const Num& a, const Num& b) { return apply(a, b, [](auto x, auto y) { return x - y; }); }
Num mul(const Num& a, const Num& b) { return apply(a, b, [](auto x, auto y) { return x * y; }); }
// Comparisons convert as the arithmetic does.
bool less(const Num& a, const Num& b) {
  if (kind(a, b) == Num::F32) return static_cast<float>(a.v) < static_cast<float>(b.v);
  return a.v < b.v;
}
bool equal(const Num& a, const Num& b) {
  if (kind(a, b) == Num::F32) return static_cast<float>(a.v) == static_cast<float>(b.v);
  return a.v == b.v;
}

const double kMinPosition = -1.2;
const double kMaxPosition = 0.6;
const double kMaxSpeed = 0.07;
const double kGoalPosition = 0.45;
const double kPower = 0.0015;

EnvSpec make_spec() {
  EnvSpec s;
  s.id = "MountainCarContinuous-v0";
  s.observation_space = Space::box({static_cast<float>(kMinPosition), static_cast<float>(-kMaxSpeed)},
                                   {static_cast<float>(kMaxPosition), static_cast<float>(kMaxSpeed)});
  s.action_space = Space::box({-1.0f}, {1.0f});
  s.max_episode_steps = 999;
  return s;
}

}  // namespace

const EnvSpec& MountainCarContinuous::spec() const {
  static const EnvSpec spec = make_spec();
  return spec;
}

void MountainCarContinuous::reset(Rng& rng, float* obs) {
  s_[0] = rng.uniform(-0.6, -0.4);
  s_[1] = 0;
  started();
  observe(obs);
}

StepResult MountainCarContinuous::step(const Action& action, Rng& /*rng*/, float* obs) {
  const Num::Kind state = state_f32_ ? Num::F32 : Num::F64;
  Num position{s_[0], state}, velocity{s_[1], state};
  const Num a{static_cast<double>(action.box[0]), Num::F32};
  // force = min(max(action[0], min_action), max_action): Python's max and min keep the first
  // argument unless the second compares greater (smaller).
  Num force = less(a, py(-1.0)) ? py(-1.0) : a;
  force = less(py(1.0), force) ? py(1.0) : force;
  const Num cos3 = py(std::cos(mul(py(3), position).v));  // math.cos: a Python float
  velocity = add(velocity, sub(mul(force, py(kPower)), mul(py(0.0025), cos3)));
  if (less(py(kMaxSpeed), velocity)) velocity = py(kMaxSpeed);
  if (less(velocity, py(-kMaxSpeed))) velocity = py(-kMaxSpeed);
  position = add(position, velocity);
  if (less(py(kMaxPosition), position)) position = py(kMaxPosition);
  if (less(position, py(kMinPosition))) position = py(kMinPosition);
  if (equal(position, py(kMinPosition)) && less(velocity, py(0))) velocity = py(0);

  StepResult r;
  r.terminated = !less(position, py(kGoalPosition)) && !less(velocity, py(0));
  r.reward = (r.terminated ? 100.0 : 0.0) - libm_square(static_cast<double>(action.box[0])) * 0.1;
  // self.state = np.array([position, velocity], dtype=np.float32). Through a volatile: GCC 12 at -O2
  // dropped this double -> float -> double rounding of a value it had merged from both kinds' paths
  // (seen: the state kept its float64 bits; tests/rl's replay of Gymnasium caught it).
  volatile float p32 = static_cast<float>(position.v), v32 = static_cast<float>(velocity.v);
  s_[0] = p32;
  s_[1] = v32;
  state_f32_ = true;
  observe(obs);
  return r;
}

void MountainCarContinuous::observe(float* obs) const {
  obs[0] = static_cast<float>(s_[0]);
  obs[1] = static_cast<float>(s_[1]);
}

}  // namespace xlaunch::rl
