// The built-in tensor environments, one environment (a row of the state tensors) at a time: the
// counter-based generator, the dynamics of Gymnasium's classic-control set in float32, and the step
// of one row with its time limit, automatic reset and episode statistics. The CPU loop
// (runtime/src/rl/tensor_env.cpp) and the CUDA kernel (env_rows.cu) run these same functions, so the
// environments are one source on every device; and the generic tensor-operation step
// (tensor_env.cpp) is tested against this one bitwise. No LibTorch here: raw pointers.
//
// Dynamics: Gymnasium 1.4's, in float32 with float32 constants, operation for operation in the
// order of Gymnasium's code (Isaac Gym and Brax also simulate in float32). They differ from
// Gymnasium's float64 by rounding only: tests/rl compares one step at a time from Gymnasium's own
// states (the tolerance per environment is in docs/rl.md). Compiled with -ffp-contract=off.
#pragma once

#include <cmath>
#include <cstdint>

struct CUstream_st;  // as in cuda_runtime_api.h, so this header needs no CUDA headers

#if defined(__CUDACC__)
#define XL_ROW __host__ __device__ inline
// Called four times a step (Acrobot's rk4): one copy in the kernel, not four (each holds five
// sines and cosines, whose slow paths make most of the kernel's size).
#define XL_ROW_CALL __host__ __device__ __noinline__
#else
#define XL_ROW inline
#define XL_ROW_CALL inline
#endif

namespace xlaunch::kernels::env_rows {

// ---- the generator -------------------------------------------------------------------------
// Environment i draws from the splitmix64 sequence that starts at its key, env_seed(seed, i):
// draw c (c = 1, 2, ...) is splitmix64's output for the state key + c * gamma, a pure function of
// (key, c). So each environment's draws depend on its key and how many it has drawn, never on the
// number of environments, the device or the order rows run in, and a tensor of counters draws
// for every row at once (TensorRng does it in tensor operations, bitwise the same).
constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;

XL_ROW uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A uniform double in [0, 1) with 53 random bits, as xlaunch::Rng::uniform takes them.
XL_ROW double unit(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }

// One row's draws: the key, and its counter of draws made (advanced by each draw).
struct Draws {
  uint64_t key;
  int64_t* counter;
  // Uniform in [low, high), computed in double as Rng::uniform computes it, then rounded to float.
  XL_ROW float uniform(double low, double high) {
    const int64_t c = ++*counter;
    const double u = unit(mix64(key + static_cast<uint64_t>(c) * kGamma));
    return static_cast<float>(low + (high - low) * u);
  }
};

// One step's result, apart from the observation.
struct Outcome {
  float reward = 0;
  bool terminated = false;
};

constexpr float kPi = 3.14159265358979323846f;

// ---- CartPole-v1 ----------------------------------------------------------------------------
// Each environment: its state and observation widths, kActions (Discrete(kActions), or 0 for a Box
// of one element), Gymnasium's id, and reset/step/observe of one row. Spaces and time limits are
// the thread pool's (make_env(kId)->spec()), the same Gymnasium ones.
struct CartPole {
  static constexpr int kState = 4, kObs = 4, kActions = 2;
  static constexpr const char* kId = "CartPole-v1";
  XL_ROW static void reset(float* s, Draws& d) {
    for (int k = 0; k < 4; ++k) s[k] = d.uniform(-0.05, 0.05);
  }
  XL_ROW static Outcome step(float* s, int64_t action, const float*) {
    const float gravity = 9.8f, masspole = 0.1f, total_mass = 0.1f + 1.0f, length = 0.5f;
    const float polemass_length = masspole * length, tau = 0.02f;
    const float theta_threshold = static_cast<float>(12 * 2 * 3.14159265358979323846 / 360);
    float x = s[0], x_dot = s[1], theta = s[2], theta_dot = s[3];
    const float force = action == 1 ? 10.0f : -10.0f;
    const float costheta = cosf(theta), sintheta = sinf(theta);
    const float temp = (force + polemass_length * (theta_dot * theta_dot) * sintheta) / total_mass;
    const float thetaacc = (gravity * sintheta - costheta * temp) /
                           (length * (4.0f / 3.0f - masspole * (costheta * costheta) / total_mass));
    const float xacc = temp - polemass_length * thetaacc * costheta / total_mass;
    x = x + tau * x_dot;
    x_dot = x_dot + tau * xacc;
    theta = theta + tau * theta_dot;
    theta_dot = theta_dot + tau * thetaacc;
    s[0] = x, s[1] = x_dot, s[2] = theta, s[3] = theta_dot;
    Outcome o;
    o.terminated = x < -2.4f || x > 2.4f || theta < -theta_threshold || theta > theta_threshold;
    o.reward = 1.0f;
    return o;
  }
  XL_ROW static void observe(const float* s, float* obs) {
    for (int k = 0; k < 4; ++k) obs[k] = s[k];
  }
};

// ---- Acrobot-v1 ('book' dynamics, one rk4 step of 0.2) --------------------------------------
struct Acrobot {
  static constexpr int kState = 4, kObs = 6, kActions = 3;
  static constexpr const char* kId = "Acrobot-v1";
  XL_ROW_CALL static void dsdt(const float* y, float a, float* dy) {
    const float m1 = 1, m2 = 1, l1 = 1, lc1 = 0.5f, lc2 = 0.5f, I1 = 1, I2 = 1, g = 9.8f;
    const float theta1 = y[0], theta2 = y[1], dtheta1 = y[2], dtheta2 = y[3];
    const float d1 = m1 * (lc1 * lc1) + m2 * ((l1 * l1) + (lc2 * lc2) + 2 * l1 * lc2 * cosf(theta2)) + I1 + I2;
    const float d2 = m2 * ((lc2 * lc2) + l1 * lc2 * cosf(theta2)) + I2;
    const float phi2 = m2 * lc2 * g * cosf(theta1 + theta2 - kPi / 2.0f);
    const float phi1 = -m2 * l1 * lc2 * (dtheta2 * dtheta2) * sinf(theta2) -
                       2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * sinf(theta2) +
                       (m1 * lc1 + m2 * l1) * g * cosf(theta1 - kPi / 2) + phi2;
    const float ddtheta2 = (a + d2 / d1 * phi1 - m2 * l1 * lc2 * (dtheta1 * dtheta1) * sinf(theta2) - phi2) /
                           (m2 * (lc2 * lc2) + I2 - (d2 * d2) / d1);
    const float ddtheta1 = -(d2 * ddtheta2 + phi1) / d1;
    dy[0] = dtheta1, dy[1] = dtheta2, dy[2] = ddtheta1, dy[3] = ddtheta2;
  }
  XL_ROW static float wrap(float x, float m, float M) {
    const float diff = M - m;
    while (x > M) x = x - diff;
    while (x < m) x = x + diff;
    return x;
  }
  XL_ROW static float bound(float x, float m, float M) { return fminf(fmaxf(x, m), M); }
  XL_ROW static void reset(float* s, Draws& d) {
    for (int k = 0; k < 4; ++k) s[k] = d.uniform(-0.1, 0.1);
  }
  XL_ROW static Outcome step(float* s, int64_t action, const float*) {
    const float dt = 0.2f, dt2 = dt / 2.0f;
    const float a = static_cast<float>(action - 1);  // torques -1, 0, +1
    float k1[4], k2[4], k3[4], k4[4], y[4];
    dsdt(s, a, k1);
    for (int i = 0; i < 4; ++i) y[i] = s[i] + dt2 * k1[i];
    dsdt(y, a, k2);
    for (int i = 0; i < 4; ++i) y[i] = s[i] + dt2 * k2[i];
    dsdt(y, a, k3);
    for (int i = 0; i < 4; ++i) y[i] = s[i] + dt * k3[i];
    dsdt(y, a, k4);
    for (int i = 0; i < 4; ++i) y[i] = s[i] + dt / 6.0f * (k1[i] + 2 * k2[i] + 2 * k3[i] + k4[i]);
    s[0] = wrap(y[0], -kPi, kPi);
    s[1] = wrap(y[1], -kPi, kPi);
    s[2] = bound(y[2], -4 * kPi, 4 * kPi);
    s[3] = bound(y[3], -9 * kPi, 9 * kPi);
    Outcome o;
    o.terminated = -cosf(s[0]) - cosf(s[1] + s[0]) > 1.0f;
    o.reward = o.terminated ? 0.0f : -1.0f;
    return o;
  }
  XL_ROW static void observe(const float* s, float* obs) {
    obs[0] = cosf(s[0]), obs[1] = sinf(s[0]), obs[2] = cosf(s[1]), obs[3] = sinf(s[1]);
    obs[4] = s[2], obs[5] = s[3];
  }
};

// ---- MountainCar-v0 -------------------------------------------------------------------------
struct MountainCar {
  static constexpr int kState = 2, kObs = 2, kActions = 3;
  static constexpr const char* kId = "MountainCar-v0";
  // Both mountain cars after the push: speed and position clipped, stopped at the left wall; into s.
  XL_ROW static void move(float* s, float position, float velocity) {
    velocity = fminf(fmaxf(velocity, -0.07f), 0.07f);
    position += velocity;
    position = fminf(fmaxf(position, -1.2f), 0.6f);
    if (position == -1.2f && velocity < 0) velocity = 0;
    s[0] = position, s[1] = velocity;
  }
  XL_ROW static void reset(float* s, Draws& d) {
    s[0] = d.uniform(-0.6, -0.4);
    s[1] = 0;
  }
  XL_ROW static Outcome step(float* s, int64_t action, const float*) {
    float position = s[0], velocity = s[1];
    velocity += static_cast<float>(action - 1) * 0.001f + cosf(3 * position) * (-0.0025f);
    move(s, position, velocity);
    position = s[0], velocity = s[1];
    Outcome o;
    o.terminated = position >= 0.5f && velocity >= 0;
    o.reward = -1.0f;
    return o;
  }
  XL_ROW static void observe(const float* s, float* obs) { obs[0] = s[0], obs[1] = s[1]; }
};

// ---- MountainCarContinuous-v0 ---------------------------------------------------------------
// Gymnasium keeps this one's state in float32 after every step; the force is the action clipped to
// [-1, 1], the reward's action cost uses the action as given.
struct MountainCarContinuous {
  static constexpr int kState = 2, kObs = 2, kActions = 0;
  static constexpr const char* kId = "MountainCarContinuous-v0";
  XL_ROW static void reset(float* s, Draws& d) {
    s[0] = d.uniform(-0.6, -0.4);
    s[1] = 0;
  }
  XL_ROW static Outcome step(float* s, int64_t, const float* action) {
    float position = s[0], velocity = s[1];
    const float force = fminf(fmaxf(action[0], -1.0f), 1.0f);
    velocity += force * 0.0015f - 0.0025f * cosf(3 * position);
    MountainCar::move(s, position, velocity);
    position = s[0], velocity = s[1];
    Outcome o;
    o.terminated = position >= 0.45f && velocity >= 0;
    o.reward = (o.terminated ? 100.0f : 0.0f) - action[0] * action[0] * 0.1f;
    return o;
  }
  XL_ROW static void observe(const float* s, float* obs) { obs[0] = s[0], obs[1] = s[1]; }
};

// ---- Pendulum-v1 (g = 10) -------------------------------------------------------------------
struct Pendulum {
  static constexpr int kState = 2, kObs = 3, kActions = 0;
  static constexpr const char* kId = "Pendulum-v1";
  // ((x + pi) % (2 pi)) - pi with Python's floored modulo.
  XL_ROW static float angle_normalize(float x) {
    const float b = 2 * kPi;
    float mod = fmodf(x + kPi, b);
    if (mod < 0) mod += b;
    return mod - kPi;
  }
  XL_ROW static void reset(float* s, Draws& d) {
    s[0] = d.uniform(-3.14159265358979323846, 3.14159265358979323846);
    s[1] = d.uniform(-1.0, 1.0);
  }
  XL_ROW static Outcome step(float* s, int64_t, const float* action) {
    const float th = s[0], thdot = s[1];
    const float u = fminf(fmaxf(action[0], -2.0f), 2.0f);
    const float n = angle_normalize(th);
    const float costs = n * n + 0.1f * (thdot * thdot) + 0.001f * (u * u);
    float newthdot = thdot + (3 * 10.0f / (2 * 1.0f) * sinf(th) + 3.0f / (1.0f * 1.0f) * u) * 0.05f;
    newthdot = fminf(fmaxf(newthdot, -8.0f), 8.0f);
    const float newth = th + newthdot * 0.05f;
    s[0] = newth, s[1] = newthdot;
    Outcome o;
    o.reward = -costs;
    return o;
  }
  XL_ROW static void observe(const float* s, float* obs) { obs[0] = cosf(s[0]), obs[1] = sinf(s[0]), obs[2] = s[1]; }
};

// ---- one row's step ---------------------------------------------------------------------------
// The tensors of a step, as raw pointers (row i's values at i, or i * width).
struct Frame {
  float* state;            // [N, kState]
  const uint64_t* key;     // [N]
  int64_t* counter;        // [N] draws made
  uint8_t* needs_reset;    // [N] NextStep: the last step ended the episode
  double* ret;             // [N] the running episode's return
  int64_t* len;            // [N] the running episode's steps
  const int64_t* action;   // [N] Discrete, or null
  const float* box;        // [N] Box (the built-in Box spaces have one element), or null
  float* obs;              // [N, kObs] out
  float* final_obs;        // [N, kObs] out, SameStep only (else null)
  float* reward;           // [N] out
  bool* terminated;        // [N] out
  bool* truncated;         // [N] out
  float* episode_return;   // [N] out: the return of the episode that ended in this row, else 0
  int64_t* episode_length; // [N] out: its length, else 0
  int64_t max_steps;       // the time limit, 0: none
};

template <class E>
XL_ROW void reset_row(const Frame& f, int64_t i) {
  float* s = f.state + i * E::kState;
  Draws d{f.key[i], f.counter + i};
  E::reset(s, d);
  f.needs_reset[i] = 0;
  f.ret[i] = 0;
  f.len[i] = 0;
}

// A new episode in row i, with outputs (reset() of the whole batch).
template <class E>
XL_ROW void start_row(const Frame& f, int64_t i) {
  reset_row<E>(f, i);
  E::observe(f.state + i * E::kState, f.obs + i * E::kObs);
  if (f.final_obs)
    for (int k = 0; k < E::kObs; ++k) f.final_obs[i * E::kObs + k] = 0;
  f.reward[i] = 0, f.terminated[i] = false, f.truncated[i] = false;
  f.episode_return[i] = 0, f.episode_length[i] = 0;
}

// Row i's action: in range (a Discrete one clamped into 0..kActions-1, a non-finite Box one read as
// 0), and whether it was already (on the CPU actions are checked before the step, and always are).
template <class E>
XL_ROW bool read_action(const Frame& f, int64_t i, int64_t& action, float& box) {
  if (E::kActions == 0) {
    const float v = f.box[i];
    const bool finite = v - v == 0;  // NaN and the infinities give NaN
    box = finite ? v : 0.0f;
    return finite;
  }
  const int64_t a = f.action[i];
  action = a < 0 ? 0 : a >= E::kActions ? E::kActions - 1 : a;
  return action == a;
}

// Row i's step, with the pool's semantics (EnvPool::Impl::advance): NextStep starts the next episode
// in the step after one ended (its action ignored, reward 0, neither flag); SameStep starts it in
// the same step and keeps the ended episode's last observation in final_obs.
// Returns whether the row's action was in range.
template <class E>
XL_ROW bool step_row(const Frame& f, int64_t i) {
  float* s = f.state + i * E::kState;
  float* obs = f.obs + i * E::kObs;
  int64_t action = 0;
  float box = 0;
  const bool ok = read_action<E>(f, i, action, box);
  if (f.final_obs == nullptr && f.needs_reset[i]) {
    start_row<E>(f, i);
    return ok;
  }
  const Outcome o = E::step(s, action, &box);
  const int64_t len = f.len[i] + 1;
  const double ret = f.ret[i] + static_cast<double>(o.reward);
  const bool truncated = f.max_steps > 0 && len >= f.max_steps;
  const bool done = o.terminated || truncated;
  f.reward[i] = o.reward, f.terminated[i] = o.terminated, f.truncated[i] = truncated;
  f.episode_return[i] = done ? static_cast<float>(ret) : 0.0f;
  f.episode_length[i] = done ? len : 0;
  f.ret[i] = ret, f.len[i] = len;
  if (f.final_obs) {
    float* fin = f.final_obs + i * E::kObs;
    if (done) {
      E::observe(s, fin);
      reset_row<E>(f, i);
    } else {
      for (int k = 0; k < E::kObs; ++k) fin[k] = 0;
    }
  } else if (done) {
    f.needs_reset[i] = 1;
  }
  E::observe(s, obs);
  return ok;
}

// ---- the CUDA kernel (env_rows.cu; compiled where CUDA is) ----------------------------------
enum class EnvKind { CartPole, Acrobot, MountainCar, MountainCarContinuous, Pendulum };

// One thread per row on `stream`: start == true starts every row's episode (start_row), else steps
// it (step_row). A Discrete action outside 0..kActions-1 is clamped into range and a non-finite
// Box action read as 0; either adds 1 to *bad_actions (a device counter). Throws std::runtime_error
// naming the CUDA error if the launch fails; where CUDA is not built, names that.
void cuda_rows(EnvKind kind, const Frame& frame, int64_t n, bool start, unsigned long long* bad_actions,
               CUstream_st* stream);

}  // namespace xlaunch::kernels::env_rows
