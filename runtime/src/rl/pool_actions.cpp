#include "rl/pool_actions.h"

#include <cmath>
#include <sstream>

#include "xlaunch/error.h"

namespace xlaunch::rl::detail {

std::string shape_of(at::IntArrayRef sizes) {
  std::ostringstream s;
  s << '[';
  for (size_t i = 0; i < sizes.size(); ++i) s << (i ? ", " : "") << sizes[i];
  s << ']';
  return s.str();
}

namespace {

bool is_integer(at::ScalarType t) {
  return t == at::kByte || t == at::kChar || t == at::kShort || t == at::kInt || t == at::kLong;
}

template <class T>
void store_discrete(const T* values, const Space& space, const int64_t* env_ids, int64_t k, const std::string& call,
                    const NameEnv& name, ActionSlots& slots) {
  for (int64_t r = 0; r < k; ++r) {
    const int64_t a = static_cast<int64_t>(values[r]);
    if (a < 0 || a >= space.n)
      throw UsageError(call + ": the action of " + name(env_ids[r]) + " (row " + std::to_string(r) + ") is " +
                       std::to_string(a) + ", outside " + space.describe() + ": expected 0.." +
                       std::to_string(space.n - 1));
  }
  for (int64_t r = 0; r < k; ++r) slots.discrete[env_ids[r]] = static_cast<int64_t>(values[r]);
}

template <class T>
void store_box(const T* values, const Space& space, const int64_t* env_ids, int64_t k, const std::string& call,
               const NameEnv& name, ActionSlots& slots) {
  const int64_t m = slots.numel;
  for (int64_t i = 0; i < k * m; ++i)
    if (!std::isfinite(values[i]))
      throw UsageError(call + ": the action of " + name(env_ids[i / m]) + " (row " + std::to_string(i / m) +
                       ") holds " + std::to_string(static_cast<double>(values[i])) + " at element " +
                       std::to_string(i % m) + ": actions of " + space.describe() + " must be finite");
  for (int64_t r = 0; r < k; ++r) {
    float* out = slots.box.data() + env_ids[r] * m;
    for (int64_t j = 0; j < m; ++j) out[j] = static_cast<float>(values[r * m + j]);
  }
}

}  // namespace

ActionSlots::ActionSlots(const Space& space, int64_t num_envs) : numel(space.numel()) {
  if (space.kind == Space::Kind::Discrete)
    discrete.assign(num_envs, 0);
  else
    box.assign(num_envs * numel, 0.f);
}

Action ActionSlots::of(int64_t env) const {
  Action a;
  if (discrete.empty())
    a.box = box.data() + env * numel;
  else
    a.discrete = discrete[env];
  return a;
}

void store_actions(const Space& space, const at::Tensor& actions, const int64_t* env_ids, int64_t k,
                   const std::string& call, const NameEnv& name, ActionSlots& slots) {
  const at::IntArrayRef sizes = actions.sizes();
  const at::ScalarType dtype = actions.scalar_type();
  const bool discrete = space.kind == Space::Kind::Discrete;
  std::vector<int64_t> want{k};
  for (int64_t d : space.shape) want.push_back(d);
  bool ok;
  if (discrete)
    ok = is_integer(dtype) && (sizes == at::IntArrayRef{k} || sizes == at::IntArrayRef{k, 1});
  else
    ok = (dtype == at::kFloat || dtype == at::kDouble) && sizes == at::IntArrayRef(want);
  if (!ok) {
    const std::string first = k > 0 ? " (the first: " + name(env_ids[0]) + ")" : "";
    const std::string expected =
        discrete ? "an integer tensor of shape [" + std::to_string(k) + "] or [" + std::to_string(k) +
                       ", 1], one action in 0.." + std::to_string(space.n - 1) + " per environment"
                 : "a float32 or float64 tensor of shape " + shape_of(want) + ", one action of shape " +
                       shape_of(space.shape) + " per environment";
    throw UsageError(call + ": got actions of shape " + shape_of(sizes) + " and dtype " + c10::toString(dtype) +
                     " for " + std::to_string(k) + " environments" + first + "; expected " + expected +
                     ", for the action space " + space.describe());
  }
  switch (dtype) {
    case at::kByte: return store_discrete(actions.data_ptr<uint8_t>(), space, env_ids, k, call, name, slots);
    case at::kChar: return store_discrete(actions.data_ptr<int8_t>(), space, env_ids, k, call, name, slots);
    case at::kShort: return store_discrete(actions.data_ptr<int16_t>(), space, env_ids, k, call, name, slots);
    case at::kInt: return store_discrete(actions.data_ptr<int32_t>(), space, env_ids, k, call, name, slots);
    case at::kLong: return store_discrete(actions.data_ptr<int64_t>(), space, env_ids, k, call, name, slots);
    case at::kFloat: return store_box(actions.data_ptr<float>(), space, env_ids, k, call, name, slots);
    case at::kDouble: return store_box(actions.data_ptr<double>(), space, env_ids, k, call, name, slots);
    default: break;
  }
}

void check_send_ids(const int64_t* env_ids, int64_t k, int64_t num_envs, const std::vector<uint8_t>& in_flight,
                    const std::string& call, const NameEnv& name, std::vector<uint8_t>& seen) {
  int64_t r = 0;
  std::string error;
  for (; r < k && error.empty(); ++r) {
    const int64_t id = env_ids[r];
    if (id < 0 || id >= num_envs)
      error = call + ": env_ids[" + std::to_string(r) + "] is " + std::to_string(id) +
              ", not an environment of this pool: expected 0.." + std::to_string(num_envs - 1);
    else if (in_flight[id])
      error = call + ": " + name(id) + " is already in flight (sent, and not yet returned by recv()): " +
              "send an environment again only after recv() has returned it";
    else if (seen[id])
      error = call + ": " + name(id) + " appears twice in env_ids (the second time in row " + std::to_string(r) +
              "): each environment steps at most once per send()";
    else
      seen[id] = 1;
  }
  for (int64_t q = 0; q < r; ++q)
    if (env_ids[q] >= 0 && env_ids[q] < num_envs) seen[env_ids[q]] = 0;
  if (!error.empty()) throw UsageError(error);
}

}  // namespace xlaunch::rl::detail
