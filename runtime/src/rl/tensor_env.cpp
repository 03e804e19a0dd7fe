// TensorEnv (xlaunch/rl/tensor_env.h): the built-in environments' fused step (tensor_rows_cpu.h on
// the CPU, env_rows.cu on a GPU), the generic step of a user's environment in tensor operations,
// and the counter-based generator both draw from.
#include "xlaunch/rl/tensor_env.h"

#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>

#include <cmath>
#include <cstring>
#include <deque>

#include "profile/step_clock.h"
#include "rl/pool_actions.h"
#include "rl/tensor_env_access.h"
#include "rl/tensor_rows_cpu.h"
#if XLAUNCH_HAVE_CUDA
#include "rl/tensor_env_cuda.h"
#endif
#include "xlaunch/error.h"

namespace xlaunch::rl {
namespace {

namespace rows = kernels::env_rows;
using detail::RowsTraits;

int64_t bits_i64(uint64_t v) {
  int64_t r;
  std::memcpy(&r, &v, sizeof r);
  return r;
}

// x >> s on the 64 bits of an int64 tensor, as on a uint64 (a logical shift: torch's is arithmetic).
at::Tensor shift_right(const at::Tensor& x, int s) {
  return x.bitwise_right_shift(s).bitwise_and(bits_i64(~0ull >> s));
}

const RowsTraits* find_builtin(const std::string& id) {
  int64_t count = 0;
  const RowsTraits* t = detail::rows_traits(&count);
  for (int64_t i = 0; i < count; ++i)
    if (id == t[i].id) return &t[i];
  return nullptr;
}

std::string builtin_list() {
  std::string out;
  for (const std::string& id : tensor_env_ids()) out += (out.empty() ? "" : ", ") + id;
  return out;
}

// The built-in environments' spaces: the pool's own (the same Gymnasium spaces and time limits).
EnvSpec builtin_spec(const RowsTraits& t) { return make_env(t.id)->spec(); }

using detail::shape_of;

// A built-in environment as a TensorEnvironment: what the generic step calls (on the CPU; tests
// compare it with the fused step). TensorEnv steps the built-ins with the fused rows otherwise.
class BuiltinEnv final : public TensorEnvironment {
 public:
  explicit BuiltinEnv(const RowsTraits& t) : t_(t), spec_(builtin_spec(t)) {}
  const EnvSpec& spec() const override { return spec_; }
  void allocate(int64_t num_envs, c10::Device device) override {
    n_ = num_envs;
    state = at::zeros({num_envs, t_.state}, at::TensorOptions().dtype(at::kFloat).device(device));
  }
  void reset(const at::Tensor& mask, TensorRng& rng) override {
    require_cpu("reset");
    const at::Tensor m = mask.contiguous();
    detail::cpu_reset_rows(t_.kind, state.data_ptr<float>(), reinterpret_cast<const uint64_t*>(rng.keys().data_ptr<int64_t>()),
                           rng.counters().data_ptr<int64_t>(), m.data_ptr<bool>(), n_);
  }
  TensorStep step(const at::Tensor& actions) override {
    require_cpu("step");
    TensorStep r;
    r.reward = at::empty({n_}, at::kFloat);
    r.terminated = at::empty({n_}, at::kBool);
    const bool box = t_.actions == 0;
    detail::cpu_step_rows(t_.kind, state.data_ptr<float>(), box ? nullptr : actions.data_ptr<int64_t>(),
                          box ? actions.data_ptr<float>() : nullptr, n_, r.reward.data_ptr<float>(),
                          r.terminated.data_ptr<bool>());
    return r;
  }
  at::Tensor observe() override {
    require_cpu("observe");
    at::Tensor obs = at::empty({n_, t_.obs}, at::kFloat);
    detail::cpu_observe_rows(t_.kind, state.data_ptr<float>(), obs.data_ptr<float>(), n_);
    return obs;
  }
  at::Tensor state;  // [N, state]

 private:
  void require_cpu(const char* call) const {
    if (!state.device().is_cpu())
      throw UsageError(std::string("TensorEnv: the built-in environments' generic ") + call +
                          " runs on the CPU only (a GPU steps them with the fused kernel)");
  }
  RowsTraits t_;
  EnvSpec spec_;
  int64_t n_ = 0;
};

}  // namespace

// ---- the generator ----------------------------------------------------------------------------

TensorRng::TensorRng(int64_t num_envs, uint64_t seed, c10::Device device) {
  at::Tensor keys = at::empty({num_envs}, at::kLong);
  int64_t* k = keys.data_ptr<int64_t>();
  for (int64_t i = 0; i < num_envs; ++i) k[i] = bits_i64(env_seed(seed, i));
  keys_ = keys.to(device);
  counters_ = at::zeros({num_envs}, at::TensorOptions().dtype(at::kLong).device(device));
}

at::Tensor TensorRng::uniform(const at::Tensor& mask, int64_t k, double low, double high) {
  const int64_t n = keys_.size(0);
  if (mask.scalar_type() != at::kBool || mask.dim() != 1 || mask.size(0) != n || mask.device() != keys_.device())
    throw UsageError("TensorRng::uniform: mask is " + std::string(c10::toString(mask.scalar_type())) + " " +
                     shape_of(mask.sizes()) + " on " + mask.device().str() + "; give a bool [" + std::to_string(n) +
                     "] tensor on " + keys_.device().str() + " (true where an environment draws)");
  if (k < 1) throw UsageError("TensorRng::uniform: k is " + std::to_string(k) + "; draw at least one value (k >= 1)");
  // Draw c of environment i: splitmix64's output at key_i + c * gamma (rows::Draws, bit for bit).
  const at::Tensor c = counters_.unsqueeze(1) + at::arange(1, k + 1, keys_.options());
  at::Tensor z = keys_.unsqueeze(1) + c * bits_i64(rows::kGamma);
  z = (z ^ shift_right(z, 30)) * bits_i64(0xBF58476D1CE4E5B9ull);
  z = (z ^ shift_right(z, 27)) * bits_i64(0x94D049BB133111EBull);
  z = z ^ shift_right(z, 31);
  const at::Tensor u = shift_right(z, 11).to(at::kDouble) * 0x1.0p-53;
  counters_.add_(mask.to(at::kLong) * k);
  return (u * (high - low) + low).to(at::kFloat);
}

// ---- TensorEnv ------------------------------------------------------------------------------------

struct TensorEnv::Impl {
  Impl(TensorEnvOptions o, bool generic, bool device_like);

  std::string name() const { return "TensorEnv(" + spec.id + ")"; }
  at::TensorOptions on(at::ScalarType t) const { return at::TensorOptions().dtype(t).device(device); }
  at::Tensor prepare_actions(const at::Tensor& actions);
  EnvBatch new_batch() const;
  EnvBatch fused(const at::Tensor* actions);
  EnvBatch generic_reset();
  EnvBatch generic_step(const at::Tensor& actions);
  void log_episodes(EnvBatch& b);

  std::unique_ptr<TensorEnvironment> env;
  const RowsTraits* builtin = nullptr;  // set: the fused rows step it
  BuiltinEnv* builtin_env = nullptr;
  EnvSpec spec;
  int64_t n = 0;
  c10::Device device;
  bool same_step = false;
  std::unique_ptr<TensorRng> rng;
  at::Tensor needs_reset;  // [N] uint8 (NextStep)
  at::Tensor ret;          // [N] double: the running episode's return
  at::Tensor len;          // [N] int64: its steps
  at::Tensor bad;          // [1] int64: bad actions seen on a GPU, since the last check
  bool started = false;
  int64_t env_steps = 0;
  // On the CPU actions are checked before each step and episodes kept in a host list; on a GPU (and
  // in tests, TensorEnvAccess::device_like) actions are counted and clamped, episodes kept in the ring.
  bool host_checks = true;
  std::vector<int64_t> obs_shape;  // [N, *observation shape]

  // The episodes log: on the CPU a host list; on a GPU a ring on the device (slot `capacity` is
  // where rows without an episode write), with the count written on the device and read here.
  int64_t capacity = 0;
  std::deque<Episode> host_log;
  int64_t host_dropped = 0;
  at::Tensor log_ret, log_len, log_env, log_written;
  int64_t log_read = 0;
};

TensorEnv::Impl::Impl(TensorEnvOptions o, bool generic, bool device_like) : device(o.device) {
  if (o.num_envs < 1)
    throw UsageError("TensorEnv: num_envs is " + std::to_string(o.num_envs) + "; give at least 1 environment");
  if (!device.is_cpu() && !device.is_cuda())
    throw UsageError("TensorEnv: device " + device.str() + " is not supported; give a CPU or CUDA device");
  if (device.is_cuda() && !XLAUNCH_HAVE_CUDA)
    throw UsageError("TensorEnv: device " + device.str() +
                     " was asked for, and this xlaunch was built without CUDA; use the CPU, or build with CUDA");
  n = o.num_envs;
  same_step = o.autoreset == Autoreset::SameStep;
  host_checks = device.is_cpu() && !device_like;
  if (o.factory) {
    if (!o.env_id.empty())
      throw UsageError("TensorEnv: both env_id '" + o.env_id + "' and a factory were given; give one of them");
    env = o.factory();
    if (!env) throw UsageError("TensorEnv: the factory returned no environment (a null pointer)");
  } else {
    builtin = find_builtin(o.env_id);
    if (!builtin)
      throw UsageError("TensorEnv: no built-in tensor environment '" + o.env_id + "'; the built-in ones are " +
                       builtin_list() + " (or give a TensorEnvironment through options.factory)");
    auto b = std::make_unique<BuiltinEnv>(*builtin);
    builtin_env = b.get();
    env = std::move(b);
    if (generic) builtin = nullptr;  // tests: the built-in through the generic step
  }
  spec = env->spec();
  if (spec.observation_space.kind != Space::Kind::Box)
    throw UsageError("TensorEnv(" + spec.id + "): the observation space is " + spec.observation_space.describe() +
                     "; observations are float32 tensors, so give a Box");
  if (!builtin && builtin_env && !device.is_cpu())
    throw UsageError(name() + ": the generic step of a built-in environment runs on the CPU only");
  obs_shape = {n};
  for (int64_t d : spec.observation_space.shape) obs_shape.push_back(d);
  env->allocate(n, device);
  rng = std::make_unique<TensorRng>(n, o.seed, device);
  needs_reset = at::zeros({n}, on(at::kByte));
  ret = at::zeros({n}, on(at::kDouble));
  len = at::zeros({n}, on(at::kLong));
  bad = at::zeros({1}, on(at::kLong));
  capacity = std::max<int64_t>(4096, 4 * n);
  if (!host_checks) {
    log_ret = at::zeros({capacity + 1}, on(at::kFloat));
    log_len = at::zeros({capacity + 1}, on(at::kLong));
    log_env = at::zeros({capacity + 1}, on(at::kLong));
    log_written = at::zeros({1}, on(at::kLong));
  }
}

// The actions as the step reads them: int64 [N] or float32 [N, *shape], contiguous, on the device.
// On the CPU every value is checked; on a GPU bad values are counted and clamped (the header says why).
at::Tensor TensorEnv::Impl::prepare_actions(const at::Tensor& actions) {
  const Space& space = spec.action_space;
  const std::string call = name() + ".step";
  if (!actions.defined()) throw UsageError(call + ": the actions tensor is undefined");
  std::vector<int64_t> want = {n};
  if (space.kind == Space::Kind::Box)
    for (int64_t d : space.shape) want.push_back(d);
  const bool integral = at::isIntegralType(actions.scalar_type(), /*includeBool=*/false);
  const bool floating = at::isFloatingType(actions.scalar_type());
  if (actions.sizes() != at::IntArrayRef(want) || (space.kind == Space::Kind::Discrete ? !integral : !floating))
    throw UsageError(call + ": actions are " + std::string(c10::toString(actions.scalar_type())) + " " +
                     shape_of(actions.sizes()) + "; " + space.describe() + " takes " +
                     (space.kind == Space::Kind::Discrete ? "an integer tensor " : "a floating-point tensor ") +
                     shape_of(want) + " (one row per environment)");
  at::Tensor a = actions.to(device, space.kind == Space::Kind::Discrete ? at::kLong : at::kFloat).contiguous();
  if (host_checks) {
    if (space.kind == Space::Kind::Discrete) {
      const int64_t* v = a.data_ptr<int64_t>();
      for (int64_t i = 0; i < n; ++i)
        if (v[i] < 0 || v[i] >= space.n)
          throw UsageError(call + ": the action of environment " + std::to_string(i) + " is " + std::to_string(v[i]) +
                           ", outside " + space.describe() + ": expected 0.." + std::to_string(space.n - 1) +
                           " (no environment stepped)");
    } else {
      const float* v = a.data_ptr<float>();
      const int64_t m = space.numel();
      for (int64_t i = 0; i < n * m; ++i)
        if (!std::isfinite(v[i]))
          throw UsageError(call + ": the action of environment " + std::to_string(i / m) + " holds " +
                           std::to_string(v[i]) + " at element " + std::to_string(i % m) + ": actions of " +
                           space.describe() + " must be finite (no environment stepped)");
    }
    return a;
  }
  if (builtin) return a;  // the kernel clamps and counts
  if (space.kind == Space::Kind::Discrete) {
    bad.add_(((a < 0) | (a >= space.n)).sum());
    return a.clamp(0, space.n - 1);
  }
  const at::Tensor finite = a.isfinite();
  bad.add_(finite.logical_not().sum());
  return at::where(finite, a, at::zeros({}, a.options()));
}

EnvBatch TensorEnv::Impl::new_batch() const {
  EnvBatch b;
  b.obs = at::empty(obs_shape, on(at::kFloat));
  if (same_step) b.final_obs = at::empty(obs_shape, on(at::kFloat));
  b.reward = at::empty({n}, on(at::kFloat));
  b.terminated = at::empty({n}, on(at::kBool));
  b.truncated = at::empty({n}, on(at::kBool));
  b.env_id = at::arange(n, on(at::kLong));
  b.episode_return = at::empty({n}, on(at::kFloat));
  b.episode_length = at::empty({n}, on(at::kLong));
  return b;
}

// The built-ins: one pass over the rows (a reset when actions is null).
EnvBatch TensorEnv::Impl::fused(const at::Tensor* actions) {
  EnvBatch b = new_batch();
  at::Tensor a = actions ? prepare_actions(*actions) : at::Tensor();
  rows::Frame f{};
  f.state = builtin_env->state.data_ptr<float>();
  f.key = reinterpret_cast<const uint64_t*>(rng->keys().data_ptr<int64_t>());
  f.counter = rng->counters().data_ptr<int64_t>();
  f.needs_reset = needs_reset.data_ptr<uint8_t>();
  f.ret = ret.data_ptr<double>();
  f.len = len.data_ptr<int64_t>();
  if (a.defined()) {
    if (builtin->actions == 0)
      f.box = a.data_ptr<float>();
    else
      f.action = a.data_ptr<int64_t>();
  }
  f.obs = b.obs.data_ptr<float>();
  f.final_obs = same_step ? b.final_obs.data_ptr<float>() : nullptr;
  f.reward = b.reward.data_ptr<float>();
  f.terminated = b.terminated.data_ptr<bool>();
  f.truncated = b.truncated.data_ptr<bool>();
  f.episode_return = b.episode_return.data_ptr<float>();
  f.episode_length = b.episode_length.data_ptr<int64_t>();
  f.max_steps = spec.max_episode_steps;
  if (device.is_cpu()) {
    const int64_t out_of_range = detail::cpu_rows(builtin->kind, f, n, actions == nullptr);
    if (out_of_range > 0) bad.add_(out_of_range);
  } else {
#if XLAUNCH_HAVE_CUDA
    detail::cuda_rows(builtin->kind, f, n, actions == nullptr, bad);
#endif
  }
  return b;
}

EnvBatch TensorEnv::Impl::generic_reset() {
  EnvBatch b;
  env->reset(at::ones({n}, on(at::kBool)), *rng);
  b.obs = env->observe();
  if (same_step) b.final_obs = at::zeros(obs_shape, on(at::kFloat));
  b.reward = at::zeros({n}, on(at::kFloat));
  b.terminated = at::zeros({n}, on(at::kBool));
  b.truncated = at::zeros({n}, on(at::kBool));
  b.env_id = at::arange(n, on(at::kLong));
  b.episode_return = at::zeros({n}, on(at::kFloat));
  b.episode_length = at::zeros({n}, on(at::kLong));
  needs_reset.zero_();
  ret.zero_();
  len.zero_();
  return b;
}

// The pool's semantics (EnvPool::Impl::advance) in masks: rows that start an episode in this step
// (NextStep, after an end) are stepped with the others and their results replaced.
EnvBatch TensorEnv::Impl::generic_step(const at::Tensor& actions) {
  const at::Tensor a = prepare_actions(actions);
  const at::Tensor starting = needs_reset.to(at::kBool);  // all false under SameStep
  const at::Tensor live = starting.logical_not();
  TensorStep r = env->step(a);
  const auto check = [&](const at::Tensor& t, at::ScalarType type, const char* what) {
    if (!t.defined() || t.scalar_type() != type || t.sizes() != at::IntArrayRef({n}) || t.device() != device)
      throw UsageError(name() + ": the environment's step returned " + what + " as " +
                       (t.defined() ? std::string(c10::toString(t.scalar_type())) + " " + shape_of(t.sizes()) + " on " +
                                          t.device().str()
                                    : std::string("an undefined tensor")) +
                       "; return " + c10::toString(type) + " [" + std::to_string(n) + "] on " + device.str());
  };
  check(r.reward, at::kFloat, "reward");
  check(r.terminated, at::kBool, "terminated");
  if (r.truncated.defined()) check(r.truncated, at::kBool, "truncated");

  EnvBatch b;
  const at::Tensor zero_f = at::zeros({}, on(at::kFloat));
  len = at::where(live, len + 1, len);
  ret = at::where(live, ret + r.reward.to(at::kDouble), ret);
  at::Tensor truncated = spec.max_episode_steps > 0 ? len >= spec.max_episode_steps : at::zeros({n}, on(at::kBool));
  if (r.truncated.defined()) truncated = truncated | r.truncated;
  b.terminated = r.terminated & live;
  b.truncated = truncated & live;
  const at::Tensor done = b.terminated | b.truncated;
  b.reward = at::where(live, r.reward, zero_f);
  b.episode_return = at::where(done, ret, at::zeros({}, on(at::kDouble))).to(at::kFloat);
  b.episode_length = at::where(done, len, at::zeros({}, on(at::kLong)));
  b.env_id = at::arange(n, on(at::kLong));
  const at::Tensor restart = same_step ? done : starting;
  if (same_step) b.final_obs = at::where(done.reshape({n, 1}), env->observe().reshape({n, -1}), zero_f).reshape(obs_shape);
  env->reset(restart, *rng);
  ret = at::where(restart, at::zeros({}, on(at::kDouble)), ret);
  len = at::where(restart, at::zeros({}, on(at::kLong)), len);
  if (!same_step) needs_reset = done.to(at::kByte);
  b.obs = env->observe();
  return b;
}

// Every ended episode goes to the log; on the CPU also to the batch's episodes.
void TensorEnv::Impl::log_episodes(EnvBatch& b) {
  if (host_checks) {
    const int64_t* l = b.episode_length.data_ptr<int64_t>();
    const float* r = b.episode_return.data_ptr<float>();
    for (int64_t i = 0; i < n; ++i) {
      if (l[i] == 0) continue;
      b.episodes.push_back({i, static_cast<double>(r[i]), l[i]});
      host_log.push_back(b.episodes.back());
      if (static_cast<int64_t>(host_log.size()) > capacity) {
        host_log.pop_front();
        ++host_dropped;
      }
    }
    return;
  }
  // The ring: row i's episode goes to slot (written + the episodes of rows before it) % capacity.
  const at::Tensor done = b.episode_length > 0;
  const at::Tensor position = (log_written + done.cumsum(0) - 1).remainder(capacity);
  const at::Tensor slot = at::where(done, position, at::full({}, capacity, on(at::kLong)));
  log_ret.index_copy_(0, slot, b.episode_return);
  log_len.index_copy_(0, slot, b.episode_length);
  log_env.index_copy_(0, slot, b.env_id);
  log_written.add_(done.sum());
}

TensorEnv::TensorEnv(TensorEnvOptions options) : impl_(std::make_unique<Impl>(std::move(options), false, false)) {}
TensorEnv::TensorEnv(TensorEnvOptions options, bool generic, bool device_like)
    : impl_(std::make_unique<Impl>(std::move(options), generic, device_like)) {}
TensorEnv::~TensorEnv() = default;

const EnvSpec& TensorEnv::spec() const { return impl_->spec; }
int64_t TensorEnv::num_envs() const { return impl_->n; }
c10::Device TensorEnv::device() const { return impl_->device; }
int64_t TensorEnv::env_steps() const { return impl_->env_steps; }
const char* TensorEnv::stepping() const { return impl_->builtin ? "fused" : "tensor operations"; }

EnvBatch TensorEnv::reset() {
  Impl& m = *impl_;
  const profile::PhaseScope phase(profile::kDataWait);  // as the pool's: the environments are the step's data
  EnvBatch b = m.builtin ? m.fused(nullptr) : m.generic_reset();
  m.started = true;
  return b;
}

EnvBatch TensorEnv::step(const at::Tensor& actions) {
  Impl& m = *impl_;
  if (!m.started) throw UsageError(m.name() + ".step: call reset() first: no episode has started");
  const profile::PhaseScope phase(profile::kDataWait);
  EnvBatch b = m.builtin ? m.fused(&actions) : m.generic_step(actions);
  m.env_steps += m.n;
  m.log_episodes(b);
  return b;
}

void TensorEnv::check_actions() {
  Impl& m = *impl_;
  if (m.host_checks) return;
  const int64_t bad = m.bad.item<int64_t>();
  if (bad == 0) return;
  m.bad.zero_();
  const Space& s = m.spec.action_space;
  throw UsageError(m.name() + ": " + std::to_string(bad) + " action(s) since the last check were outside " +
                   s.describe() + (s.kind == Space::Kind::Discrete ? " (expected 0.." + std::to_string(s.n - 1) + ")"
                                                                   : " (not finite)") +
                   "; they were stepped " + (s.kind == Space::Kind::Discrete ? "clamped into range" : "as 0") +
                   ". Fix the policy's actions (on a GPU they are checked when finished() or check_actions() "
                   "reads the device, not at each step)");
}

FinishedEpisodes TensorEnv::finished() {
  Impl& m = *impl_;
  check_actions();
  FinishedEpisodes out;
  if (m.host_checks) {
    out.episodes.assign(m.host_log.begin(), m.host_log.end());
    out.dropped = m.host_dropped;
    m.host_log.clear();
    m.host_dropped = 0;
    return out;
  }
  const int64_t written = m.log_written.item<int64_t>();
  const int64_t pending = written - m.log_read;
  const int64_t kept = std::min(pending, m.capacity);
  out.dropped = pending - kept;
  const at::Tensor r = m.log_ret.cpu(), l = m.log_len.cpu(), e = m.log_env.cpu();
  for (int64_t k = written - kept; k < written; ++k) {
    const int64_t s = k % m.capacity;
    out.episodes.push_back({e.data_ptr<int64_t>()[s], static_cast<double>(r.data_ptr<float>()[s]),
                            l.data_ptr<int64_t>()[s]});
  }
  m.log_read = written;
  return out;
}

std::vector<std::string> tensor_env_ids() {
  int64_t count = 0;
  const RowsTraits* t = detail::rows_traits(&count);
  std::vector<std::string> ids;
  for (int64_t i = 0; i < count; ++i) ids.push_back(t[i].id);
  return ids;
}

std::unique_ptr<TensorEnv> detail::TensorEnvAccess::make(TensorEnvOptions options, bool generic, bool device_like) {
  return std::unique_ptr<TensorEnv>(new TensorEnv(std::move(options), generic, device_like));
}

}  // namespace xlaunch::rl
