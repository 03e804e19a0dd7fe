// Space, env_seed and the registry of environment ids (env.h).
#include "xlaunch/rl/env.h"

#include <cstdio>
#include <utility>

#include "name_registry.h"
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

uint64_t env_seed(uint64_t seed, int64_t index) { return mix_seed(seed, static_cast<uint64_t>(index)); }

namespace {

// The one table of environment ids. Built on first use with the classic-control rows, so it exists
// whenever it is asked for, whatever the order of static initialisation.
NameRegistry<EnvFactory>& registry() {
  static NameRegistry<EnvFactory> r(
      {"register_env: ", "", "id", "an", "environment",
       "check the id's spelling and version, or register yours with xlaunch::rl::register_env"},
      {{"CartPole-v1", [] { return std::unique_ptr<Env>(new CartPole()); }},
       {"Acrobot-v1", [] { return std::unique_ptr<Env>(new Acrobot()); }},
       {"MountainCar-v0", [] { return std::unique_ptr<Env>(new MountainCar()); }},
       {"Pendulum-v1", [] { return std::unique_ptr<Env>(new Pendulum()); }},
       {"MountainCarContinuous-v0", [] { return std::unique_ptr<Env>(new MountainCarContinuous()); }}});
  return r;
}

}  // namespace

void register_env(const std::string& id, EnvFactory factory) { registry().add(id, std::move(factory)); }

std::unique_ptr<Env> make_env(const std::string& id) { return registry().make(id); }

std::vector<std::string> registered_envs() { return registry().names(); }

void throw_state_size(const std::string& env, size_t want, size_t got) {
  throw UsageError(env + "::set_state: the state has " + std::to_string(want) +
                   " values, got " + std::to_string(got));
}

}  // namespace xlaunch::rl
