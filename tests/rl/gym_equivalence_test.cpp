// xlaunch's classic-control environments replay Gymnasium 1.4's own trajectories (recorded by
// gym_trace.py; gym_equivalence_test.sh runs both): at each reset our environment is put into
// Gymnasium's initial state, then fed Gymnasium's actions, and each step's observation, reward,
// terminated and truncated (counted here from EnvSpec::max_episode_steps, as the pool counts it)
// must equal Gymnasium's within 1e-6. The largest differences seen are printed; they are expected
// to be 0 (the dynamics are transcribed operation for operation, classic_control.h).
//
// Acrobot is chaotic: a last-bit difference between numpy's sin/cos and the C library's, which
// some CPU and numpy build might have, would grow over an episode into a different trajectory
// with no error in the transcription. So a state that differs from Gymnasium's by no more than
// 1e-12 (relative) after a step is put back onto Gymnasium's, and counted ("re-synchronised",
// printed; 0 on the machine this was written on); a larger difference is left to grow and fail.
//
// usage: gym_equivalence_test --trace TRACE.json [gtest flags]
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "rl/classic_control.h"
#include "xlaunch/kernels/env_rows.h"
#include "xlaunch/rl/env.h"

namespace xlaunch::rl {
namespace {

std::string g_trace_path;
constexpr double kTolerance = 1e-6;

const nlohmann::json& trace() {
  static const nlohmann::json t = [] {
    std::ifstream in(g_trace_path);
    if (!in) {
      throw std::runtime_error("cannot read the trace '" + g_trace_path +
                               "': run gym_equivalence_test.sh (ctest -R gym_equivalence_test), "
                               "which records it with gym_trace.py");
    }
    return nlohmann::json::parse(in);
  }();
  return t;
}

const nlohmann::json& env_trace(const std::string& id) {
  for (const auto& e : trace().at("envs")) {
    if (e.at("id") == id) return e;
  }
  throw std::runtime_error("the trace has no environment '" + id + "'");
}

// A bound of the trace: a number, or "inf" / "-inf" (JSON has no infinity).
double bound(const nlohmann::json& j) {
  if (j.is_number()) return j.get<double>();
  return j.get<std::string>() == "-inf" ? -HUGE_VAL : HUGE_VAL;
}

void expect_space(const Space& ours, const nlohmann::json& gym, const std::string& what) {
  if (gym.contains("n")) {
    ASSERT_EQ(ours.kind, Space::Kind::Discrete) << what;
    EXPECT_EQ(ours.n, gym.at("n").get<int64_t>()) << what;
    return;
  }
  ASSERT_EQ(ours.kind, Space::Kind::Box) << what;
  const auto& low = gym.at("low");
  const auto& high = gym.at("high");
  ASSERT_EQ(ours.low.size(), low.size()) << what;
  for (size_t i = 0; i < low.size(); ++i) {
    EXPECT_EQ(static_cast<double>(ours.low[i]), bound(low[i])) << what << " low[" << i << "]";
    EXPECT_EQ(static_cast<double>(ours.high[i]), bound(high[i])) << what << " high[" << i << "]";
  }
}

// Largest |ours - gymnasium| over values, updating `max` and returning it for this call.
double max_diff(const float* ours, const std::vector<double>& gym, double& max) {
  double d = 0;
  for (size_t i = 0; i < gym.size(); ++i) d = std::max(d, std::abs(static_cast<double>(ours[i]) - gym[i]));
  max = std::max(max, d);
  return d;
}

std::string show(const float* v, size_t n) {
  std::string out = "[";
  for (size_t i = 0; i < n; ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

struct Diffs {
  double reset_obs = 0, obs = 0, reward = 0, state = 0;
  int64_t steps = 0, episodes = 0, terminated = 0, truncated = 0, states_bitwise = 0, resynced = 0;
};

void replay(const std::string& id) {
  const nlohmann::json& gym = env_trace(id);
  std::unique_ptr<Env> env = make_env(id);
  auto* cc = dynamic_cast<ClassicControl*>(env.get());
  ASSERT_NE(cc, nullptr) << id << " is not one of the classic-control classes";
  const EnvSpec& spec = env->spec();
  ASSERT_EQ(spec.max_episode_steps, gym.at("max_episode_steps").get<int64_t>()) << id;
  expect_space(spec.observation_space, gym.at("observation_space"), id + " observation space");
  expect_space(spec.action_space, gym.at("action_space"), id + " action space");

  Rng rng(0);  // unused by the classic-control steps (no noise), but part of the call
  std::vector<float> obs(spec.observation_space.numel());
  Diffs d;
  for (const auto& ep : gym.at("episodes")) {
    const std::string where = id + " episode " + std::to_string(d.episodes);
    cc->set_state(ep.at("initial_state").get<std::vector<double>>());
    cc->observe(obs.data());
    ASSERT_LE(max_diff(obs.data(), ep.at("reset_observation").get<std::vector<double>>(), d.reset_obs), kTolerance)
        << where << ": the first observation differs";
    const auto& actions = ep.at("actions");
    for (size_t t = 0; t < actions.size(); ++t) {
      const std::string at = where + " step " + std::to_string(t + 1) + " (the trace's step " +
                             std::to_string(d.steps + 1) + ")";
      Action a;
      float box = 0;
      if (spec.action_space.kind == Space::Kind::Discrete) {
        a.discrete = actions[t].get<int64_t>();
      } else {
        box = static_cast<float>(actions[t].get<double>());
        a.box = &box;
      }
      StepResult r = env->step(a, rng, obs.data());
      const bool truncated = r.truncated || static_cast<int64_t>(t + 1) >= spec.max_episode_steps;
      ++d.steps;

      const auto gym_state = ep.at("states")[t].get<std::vector<double>>();
      const auto state = cc->state();
      bool bitwise = true, last_bits = true;
      for (size_t i = 0; i < state.size(); ++i) {
        const double diff = std::abs(state[i] - gym_state[i]);
        d.state = std::max(d.state, diff);
        bitwise = bitwise && state[i] == gym_state[i];
        last_bits = last_bits && diff <= 1e-12 * std::max(1.0, std::abs(gym_state[i]));
      }
      d.states_bitwise += bitwise;
      if (!bitwise && last_bits) {
        cc->set_state(gym_state);
        ++d.resynced;
      }

      const auto gym_obs = ep.at("observations")[t].get<std::vector<double>>();
      ASSERT_LE(max_diff(obs.data(), gym_obs, d.obs), kTolerance)
          << at << ": the observation differs: ours " << show(obs.data(), obs.size()) << ", Gymnasium's "
          << ep.at("observations")[t] << " after action " << actions[t];
      const double reward_diff = std::abs(r.reward - ep.at("rewards")[t].get<double>());
      d.reward = std::max(d.reward, reward_diff);
      ASSERT_LE(reward_diff, kTolerance) << at << ": reward " << r.reward << ", Gymnasium's " << ep.at("rewards")[t];
      ASSERT_EQ(r.terminated, ep.at("terminated")[t].get<bool>()) << at << ": terminated";
      ASSERT_EQ(truncated, ep.at("truncated")[t].get<bool>()) << at << ": truncated";
      d.terminated += r.terminated;
      d.truncated += truncated;
    }
    ++d.episodes;
  }
  EXPECT_EQ(d.steps, trace().at("steps").get<int64_t>() + gym.at("edge_steps").get<int64_t>()) << id;
  std::printf("%s: %lld steps, %lld episodes (%lld terminated, %lld truncated); largest difference from "
              "Gymnasium %s: first observation %g, observation %g, reward %g, state %g; states bitwise "
              "equal after %lld of %lld steps; re-synchronised after %lld\n",
              id.c_str(), static_cast<long long>(d.steps), static_cast<long long>(d.episodes),
              static_cast<long long>(d.terminated), static_cast<long long>(d.truncated),
              trace().at("gymnasium").get<std::string>().c_str(), d.reset_obs, d.obs, d.reward, d.state,
              static_cast<long long>(d.states_bitwise), static_cast<long long>(d.steps),
              static_cast<long long>(d.resynced));
}

// ---- the tensor environments' rows (xlaunch/kernels/env_rows.h), in float32 -------------------
// Each step starts from Gymnasium's own state (rounded to float32), so a difference is that one
// step's rounding and cannot grow; tolerance: |ours - Gymnasium's| <= tolerance * max(1, |value|),
// per environment (docs/rl.md). terminated must be Gymnasium's at every step.
template <class E>
void replay_rows(const std::string& id, double tolerance) {
  namespace rows = kernels::env_rows;
  const nlohmann::json& gym = env_trace(id);
  double state_diff = 0, obs_diff = 0, reward_diff = 0;
  int64_t steps = 0, terminated = 0;
  const auto rel = [](double ours, double theirs) { return std::abs(ours - theirs) / std::max(1.0, std::abs(theirs)); };
  for (const auto& ep : gym.at("episodes")) {
    std::vector<double> prev = ep.at("initial_state").get<std::vector<double>>();
    ASSERT_EQ(prev.size(), static_cast<size_t>(E::kState)) << id;
    float s[E::kState], obs[E::kObs];
    for (int k = 0; k < E::kState; ++k) s[k] = static_cast<float>(prev[k]);
    E::observe(s, obs);
    const auto first = ep.at("reset_observation").get<std::vector<double>>();
    for (int k = 0; k < E::kObs; ++k) {
      obs_diff = std::max(obs_diff, rel(obs[k], first[k]));
      ASSERT_LE(rel(obs[k], first[k]), tolerance) << id << ": the first observation's element " << k;
    }
    const auto& actions = ep.at("actions");
    for (size_t t = 0; t < actions.size(); ++t) {
      const std::string at = id + " (the trace's step " + std::to_string(steps + 1) + ")";
      for (int k = 0; k < E::kState; ++k) s[k] = static_cast<float>(prev[k]);
      int64_t action = 0;
      float box = 0;
      if (E::kBox)
        box = static_cast<float>(actions[t].get<double>());
      else
        action = actions[t].get<int64_t>();
      const rows::Outcome o = E::step(s, action, &box);
      E::observe(s, obs);
      ++steps;
      const auto gym_state = ep.at("states")[t].get<std::vector<double>>();
      for (int k = 0; k < E::kState; ++k) {
        state_diff = std::max(state_diff, rel(s[k], gym_state[k]));
        ASSERT_LE(rel(s[k], gym_state[k]), tolerance)
            << at << ": state element " << k << " is " << s[k] << ", Gymnasium's " << gym_state[k];
      }
      const auto gym_obs = ep.at("observations")[t].get<std::vector<double>>();
      for (int k = 0; k < E::kObs; ++k) {
        obs_diff = std::max(obs_diff, rel(obs[k], gym_obs[k]));
        ASSERT_LE(rel(obs[k], gym_obs[k]), tolerance) << at << ": observation element " << k;
      }
      const double gym_reward = ep.at("rewards")[t].get<double>();
      reward_diff = std::max(reward_diff, rel(o.reward, gym_reward));
      ASSERT_LE(rel(o.reward, gym_reward), tolerance) << at << ": reward " << o.reward << ", Gymnasium's " << gym_reward;
      ASSERT_EQ(o.terminated, ep.at("terminated")[t].get<bool>()) << at << ": terminated";
      terminated += o.terminated;
      prev = gym_state;
    }
  }
  EXPECT_EQ(steps, trace().at("steps").get<int64_t>() + gym.at("edge_steps").get<int64_t>()) << id;
  if (id != "Pendulum-v1")  // which never terminates
    EXPECT_GT(terminated, 0) << id << ": the trace never terminates, the check tests too little";
  std::printf("%s in float32 (the tensor environments' rows): %lld steps from Gymnasium %s's states, %lld terminated; "
              "largest relative difference: state %.3g, observation %.3g, reward %.3g (tolerance %g)\n",
              id.c_str(), static_cast<long long>(steps), trace().at("gymnasium").get<std::string>().c_str(),
              static_cast<long long>(terminated), state_diff,
              obs_diff, reward_diff, tolerance);
}

TEST(GymEquivalence, CartPole) { replay("CartPole-v1"); }
TEST(GymEquivalence, Acrobot) { replay("Acrobot-v1"); }
TEST(GymEquivalence, MountainCar) { replay("MountainCar-v0"); }
TEST(GymEquivalence, Pendulum) { replay("Pendulum-v1"); }

TEST(GymEquivalenceRows, CartPole) { replay_rows<kernels::env_rows::CartPole>("CartPole-v1", 1e-5); }
TEST(GymEquivalenceRows, Acrobot) { replay_rows<kernels::env_rows::Acrobot>("Acrobot-v1", 1e-5); }
TEST(GymEquivalenceRows, MountainCar) { replay_rows<kernels::env_rows::MountainCar>("MountainCar-v0", 1e-5); }
TEST(GymEquivalenceRows, MountainCarContinuous) {
  replay_rows<kernels::env_rows::MountainCarContinuous>("MountainCarContinuous-v0", 1e-5);
}
TEST(GymEquivalenceRows, Pendulum) { replay_rows<kernels::env_rows::Pendulum>("Pendulum-v1", 1e-5); }

}  // namespace
}  // namespace xlaunch::rl

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--trace") xlaunch::rl::g_trace_path = argv[i + 1];
  }
  if (xlaunch::rl::g_trace_path.empty()) {
    std::fprintf(stderr, "usage: %s --trace TRACE.json (written by tests/rl/gym_trace.py; "
                         "ctest -R gym_equivalence_test runs both)\n", argv[0]);
    return 2;
  }
  return RUN_ALL_TESTS();
}
