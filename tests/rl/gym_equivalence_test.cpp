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
// The tensor environments: their rows from each of Gymnasium's states (float32, within 1e-5), and
// TensorEnv's automatic reset and time limit against Gymnasium's SyncVectorEnv (gym_vector_trace.py).
//
// usage: gym_equivalence_test --trace TRACE.json --vector_trace VECTOR.json [gtest flags]
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
#include "xlaunch/rl/tensor_env.h"

namespace xlaunch::rl {
namespace {

std::string g_trace_path;
std::string g_vector_trace_path;
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
      if (E::kActions == 0)
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
TEST(GymEquivalence, MountainCarContinuous) { replay("MountainCarContinuous-v0"); }

TEST(GymEquivalenceRows, CartPole) { replay_rows<kernels::env_rows::CartPole>("CartPole-v1", 1e-5); }
TEST(GymEquivalenceRows, Acrobot) { replay_rows<kernels::env_rows::Acrobot>("Acrobot-v1", 1e-5); }
TEST(GymEquivalenceRows, MountainCar) { replay_rows<kernels::env_rows::MountainCar>("MountainCar-v0", 1e-5); }
TEST(GymEquivalenceRows, MountainCarContinuous) {
  replay_rows<kernels::env_rows::MountainCarContinuous>("MountainCarContinuous-v0", 1e-5);
}
TEST(GymEquivalenceRows, Pendulum) { replay_rows<kernels::env_rows::Pendulum>("Pendulum-v1", 1e-5); }

// ---- TensorEnv's automatic reset and time limit against SyncVectorEnv ------------------------------
// gym_vector_trace.py records Gymnasium's SyncVectorEnv of 8 CartPoles in both autoreset modes.
// TensorEnv steps a CartPole whose resets take Gymnasium's initial states in order and whose every
// step starts from Gymnasium's state after the step before (rounded to float32: the dynamics are
// the rows', checked above; an open-loop float32 replay of a balanced pole would part from the
// float64 one within seconds). So what is compared is TensorEnv's own part: which rows reset when,
// the time limit, rewards and flags, final_obs, rows in order.
const nlohmann::json& vector_trace() {
  static const nlohmann::json t = [] {
    std::ifstream in(g_vector_trace_path);
    if (!in) throw std::runtime_error("cannot read the vector trace '" + g_vector_trace_path + "': run gym_equivalence_test.sh");
    return nlohmann::json::parse(in);
  }();
  return t;
}

class ReplayCartPole final : public TensorEnvironment {
 public:
  explicit ReplayCartPole(const nlohmann::json& mode) : mode_(mode) {}
  const EnvSpec& spec() const override {
    static const EnvSpec s = make_env("CartPole-v1")->spec();
    return s;
  }
  void allocate(int64_t n, c10::Device) override {
    state_ = at::zeros({n, 4}, at::kFloat);
    next_.assign(n, 0);
  }
  void reset(const at::Tensor& mask, TensorRng&) override {
    const bool* m = mask.data_ptr<bool>();
    for (int64_t i = 0; i < state_.size(0); ++i) {
      if (!m[i]) continue;
      const auto& starts = mode_.at("initial_states").at(i);
      if (next_[i] >= static_cast<int64_t>(starts.size()))
        throw std::runtime_error("environment " + std::to_string(i) + " starts more episodes than Gymnasium's did");
      set_row(i, starts.at(next_[i]++).get<std::vector<double>>());
    }
  }
  TensorStep step(const at::Tensor& actions) override {
    const int64_t n = state_.size(0);
    if (t_ > 0)
      for (int64_t i = 0; i < n; ++i) set_row(i, mode_.at("states").at(t_ - 1).at(i).get<std::vector<double>>());
    ++t_;
    TensorStep r{at::empty({n}, at::kFloat), at::empty({n}, at::kBool), {}};
    for (int64_t i = 0; i < n; ++i) {
      const auto o = kernels::env_rows::CartPole::step(state_.data_ptr<float>() + 4 * i, actions.data_ptr<int64_t>()[i], nullptr);
      r.reward.data_ptr<float>()[i] = o.reward;
      r.terminated.data_ptr<bool>()[i] = o.terminated;
    }
    return r;
  }
  at::Tensor observe() override { return state_.clone(); }

 private:
  void set_row(int64_t i, const std::vector<double>& s) {
    for (int k = 0; k < 4; ++k) state_.data_ptr<float>()[4 * i + k] = static_cast<float>(s.at(k));
  }
  const nlohmann::json& mode_;
  at::Tensor state_;
  std::vector<int64_t> next_;
  int64_t t_ = 0;
};

void replay_vector(const std::string& mode_name) {
  const nlohmann::json* mode = nullptr;
  for (const auto& m : vector_trace().at("modes"))
    if (m.at("mode") == mode_name) mode = &m;
  ASSERT_NE(mode, nullptr) << mode_name;
  const int64_t n = vector_trace().at("num_envs").get<int64_t>();
  TensorEnvOptions o;
  o.factory = [mode] { return std::make_unique<ReplayCartPole>(*mode); };
  o.num_envs = n;
  o.autoreset = mode_name == "SameStep" ? Autoreset::SameStep : Autoreset::NextStep;
  TensorEnv env(o);
  double obs_diff = 0;
  const auto close = [&](const at::Tensor& ours, const std::vector<double>& theirs, const std::string& what) {
    const float* p = ours.data_ptr<float>();
    for (size_t k = 0; k < theirs.size(); ++k) {
      const double d = std::abs(p[k] - theirs[k]);
      obs_diff = std::max(obs_diff, d);
      ASSERT_LE(d, 1e-5 * std::max(1.0, std::abs(theirs[k]))) << what << " element " << k;
    }
  };
  close(env.reset().obs, mode->at("reset_obs").get<std::vector<double>>(), mode_name + " reset");
  int64_t terminated = 0, truncated = 0;
  const int64_t steps = vector_trace().at("steps").get<int64_t>();
  for (int64_t t = 0; t < steps; ++t) {
    const std::string at = mode_name + " step " + std::to_string(t + 1);
    at::Tensor actions = at::empty({n}, at::kLong);
    for (int64_t i = 0; i < n; ++i) actions.data_ptr<int64_t>()[i] = mode->at("actions").at(t).at(i).get<int64_t>();
    const EnvBatch b = env.step(actions);
    close(b.obs, mode->at("obs").at(t).get<std::vector<double>>(), at + " obs");
    if (o.autoreset == Autoreset::SameStep) close(b.final_obs, mode->at("final_obs").at(t).get<std::vector<double>>(), at + " final_obs");
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(b.reward.data_ptr<float>()[i], mode->at("rewards").at(t).at(i).get<double>()) << at << " reward of " << i;
      ASSERT_EQ(b.terminated.data_ptr<bool>()[i], mode->at("terminated").at(t).at(i).get<bool>()) << at << " terminated of " << i;
      ASSERT_EQ(b.truncated.data_ptr<bool>()[i], mode->at("truncated").at(t).at(i).get<bool>()) << at << " truncated of " << i;
    }
    terminated += b.terminated.sum().item<int64_t>();
    truncated += b.truncated.sum().item<int64_t>();
  }
  EXPECT_GT(terminated, 0);
  EXPECT_GT(truncated, 0) << "no episode reached the time limit: the check tests too little";
  std::printf("TensorEnv %s against Gymnasium %s's SyncVectorEnv: %lld environments, %lld steps, %lld terminated, "
              "%lld truncated; rewards and flags equal; largest observation difference %.3g\n",
              mode_name.c_str(), vector_trace().at("gymnasium").get<std::string>().c_str(), static_cast<long long>(n),
              static_cast<long long>(steps), static_cast<long long>(terminated), static_cast<long long>(truncated),
              obs_diff);
}

TEST(GymVector, TensorEnvNextStep) { replay_vector("NextStep"); }
TEST(GymVector, TensorEnvSameStep) { replay_vector("SameStep"); }

}  // namespace
}  // namespace xlaunch::rl

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--trace") xlaunch::rl::g_trace_path = argv[i + 1];
    if (std::string(argv[i]) == "--vector_trace") xlaunch::rl::g_vector_trace_path = argv[i + 1];
  }
  if (xlaunch::rl::g_trace_path.empty() || xlaunch::rl::g_vector_trace_path.empty()) {
    std::fprintf(stderr, "usage: %s --trace TRACE.json --vector_trace VECTOR.json (written by tests/rl/gym_trace.py and "
                         "gym_vector_trace.py; ctest -R gym_equivalence_test runs them all)\n", argv[0]);
    return 2;
  }
  return RUN_ALL_TESTS();
}
