// Space, Rng, env_seed and the registry of environment ids (env.h).
#include "xlaunch/rl/env.h"

#include <cstdio>
#include <mutex>
#include <utility>

#include "rl/classic_control.h"
#include "xlaunch/error.h"

namespace xlaunch::rl {

Space Space::discrete(int64_t n) {
  if (n < 1) {
    throw UsageError("Space::discrete(" + std::to_string(n) +
                     "): a discrete space needs at least one action (n >= 1)");
  }
  Space s;
  s.kind = Kind::Discrete;
  s.n = n;
  return s;
}

Space Space::box(std::vector<float> low, std::vector<float> high) {
  if (low.size() != high.size() || low.empty()) {
    throw UsageError("Space::box: low has " + std::to_string(low.size()) + " bounds and high " +
                     std::to_string(high.size()) + "; give one low and one high per element (at least one)");
  }
  for (size_t i = 0; i < low.size(); ++i) {
    if (!(low[i] <= high[i])) {
      throw UsageError("Space::box: element " + std::to_string(i) + " has low " + std::to_string(low[i]) +
                       " above high " + std::to_string(high[i]) + " (or a NaN bound); give low <= high");
    }
  }
  Space s;
  s.kind = Kind::Box;
  s.shape = {static_cast<int64_t>(low.size())};
  s.low = std::move(low);
  s.high = std::move(high);
  return s;
}

int64_t Space::numel() const {
  if (kind == Kind::Discrete) return 1;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string Space::describe() const {
  if (kind == Kind::Discrete) return "Discrete(" + std::to_string(n) + ")";
  std::string out = "Box(";
  for (int64_t d : shape) out += std::to_string(d) + ",";
  out += ")";
  // The first few elements' bounds are enough to recognise a space in a message.
  constexpr size_t kShown = 8;
  char buf[64];
  for (size_t i = 0; i < low.size() && i < kShown; ++i) {
    std::snprintf(buf, sizeof buf, " [%g, %g]", low[i], high[i]);
    out += buf;
  }
  if (low.size() > kShown) out += " ...";
  return out;
}

namespace {

// splitmix64 (Steele, Lea, Flood 2014): advances the state by the golden gamma and mixes it; the
// seeding that xoshiro's authors recommend.
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

Rng::Rng(uint64_t seed) {
  for (uint64_t& s : s_) s = splitmix64(seed);
}

// xoshiro256** 1.0 (Blackman, Vigna 2018).
uint64_t Rng::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

// numpy's Generator.uniform computes low + (high - low) * u from the same 53-bit u in [0, 1).
double Rng::uniform(double low, double high) {
  const double u = static_cast<double>(next() >> 11) * 0x1.0p-53;
  return low + (high - low) * u;
}

// Mixing the seed first, then the index into the mixed seed: for one seed the indices give
// distinct generator seeds (splitmix64 is a bijection), and nearby seeds (rank 0, 1, ...) give
// unrelated sets.
uint64_t env_seed(uint64_t seed, int64_t index) {
  uint64_t mixed = splitmix64(seed);
  uint64_t state = mixed ^ static_cast<uint64_t>(index);
  return splitmix64(state);
}

namespace {

// The one table of environment ids. Built on first use with the classic-control rows, so it exists
// whenever it is asked for, whatever the order of static initialisation.
struct Registry {
  std::mutex mutex;
  std::vector<std::pair<std::string, EnvFactory>> rows;
};

Registry& registry() {
  static Registry r{{},
                    {{"CartPole-v1", [] { return std::unique_ptr<Env>(new CartPole()); }},
                     {"Acrobot-v1", [] { return std::unique_ptr<Env>(new Acrobot()); }},
                     {"MountainCar-v0", [] { return std::unique_ptr<Env>(new MountainCar()); }},
                     {"Pendulum-v1", [] { return std::unique_ptr<Env>(new Pendulum()); }}}};
  return r;
}

std::string ids_of(const Registry& r) {
  std::string out;
  for (const auto& row : r.rows) out += (out.empty() ? "" : ", ") + row.first;
  return out;
}

}  // namespace

void register_env(const std::string& id, EnvFactory factory) {
  if (id.empty() || !factory) {
    throw UsageError("register_env: give a non-empty id and a factory (got id '" + id + "'" +
                     (factory ? "" : " and an empty factory") + ")");
  }
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const auto& row : r.rows) {
    if (row.first == id) {
      throw UsageError("register_env: an environment is already registered as '" + id +
                       "' (registered: " + ids_of(r) + "); register yours under another id");
    }
  }
  r.rows.emplace_back(id, std::move(factory));
}

std::unique_ptr<Env> make_env(const std::string& id) {
  EnvFactory factory;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    for (const auto& row : r.rows) {
      if (row.first == id) factory = row.second;
    }
    if (!factory) {
      throw UsageError("no environment is registered as '" + id + "' (registered: " + ids_of(r) +
                       "); check the id's spelling and version, or register yours with "
                       "xlaunch::rl::register_env");
    }
  }
  std::unique_ptr<Env> env = factory();
  if (!env) throw UsageError("the factory registered as '" + id + "' returned no environment");
  return env;
}

std::vector<std::string> registered_envs() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> ids;
  for (const auto& row : r.rows) ids.push_back(row.first);
  return ids;
}

void throw_state_size(const std::string& env, size_t want, size_t got) {
  throw UsageError(env + "::set_state: the state has " + std::to_string(want) +
                   " values, got " + std::to_string(got));
}

}  // namespace xlaunch::rl
