// TensorEnv (xlaunch/rl/tensor_env.h):
// - its generator is each environment's splitmix64 stream, bit for bit (TensorRng and the rows);
// - the built-in environments' fused step equals the generic step in tensor operations bitwise, for
//   every environment and both autoreset modes (two implementations of the pool's semantics);
// - the generic step of a user's environment equals rl::EnvPool stepping the same environment one
//   object per environment (the single-process reference of the pool's contract);
// - one environment's trajectory does not depend on how many there are;
// - bad input is refused by name, and nothing steps.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "pool_test_envs.h"
#include "rl/tensor_env_access.h"
#include "usage_error.h"
#include "xlaunch/error.h"
#include "xlaunch/kernels/env_rows.h"
#include "xlaunch/rl/env_pool.h"
#include "xlaunch/rl/tensor_env.h"

namespace {

using xlaunch::Rng;
using xlaunch::UsageError;
using xlaunch::test::usage_error_of;
using xlaunch::rl::Autoreset;
using xlaunch::rl::EnvBackend;
using xlaunch::rl::EnvBatch;
using xlaunch::rl::EnvPool;
using xlaunch::rl::EnvPoolOptions;
using xlaunch::rl::Episode;
using xlaunch::rl::EnvSpec;
using xlaunch::rl::Space;
using xlaunch::rl::TensorEnv;
using xlaunch::rl::TensorEnvironment;
using xlaunch::rl::TensorEnvOptions;
using xlaunch::rl::TensorRng;
using xlaunch::rl::TensorStep;

// Random actions for every environment of a spec, from a seeded generator (the same for every run).
at::Tensor random_actions(const EnvSpec& spec, int64_t n, Rng& rng) {
  if (spec.action_space.kind == Space::Kind::Discrete) {
    at::Tensor a = torch::empty({n}, torch::kLong);
    int64_t* p = a.data_ptr<int64_t>();
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<int64_t>(rng.uniform(0, static_cast<double>(spec.action_space.n)));
    return a;
  }
  const int64_t m = spec.action_space.numel();
  at::Tensor a = torch::empty({n, m}, torch::kFloat);
  float* p = a.data_ptr<float>();
  for (int64_t i = 0; i < n * m; ++i) p[i] = static_cast<float>(rng.uniform(-2.5, 2.5));
  return a;
}

void expect_same(const at::Tensor& a, const at::Tensor& b, const std::string& what) {
  ASSERT_EQ(a.defined(), b.defined()) << what;
  if (!a.defined()) return;
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  ASSERT_EQ(a.scalar_type(), b.scalar_type()) << what;
  ASSERT_TRUE(torch::equal(a, b)) << what << ": " << a << " vs " << b;
}

void expect_same_batch(const EnvBatch& a, const EnvBatch& b, const std::string& at) {
  expect_same(a.obs, b.obs, at + " obs");
  expect_same(a.reward, b.reward, at + " reward");
  expect_same(a.terminated, b.terminated, at + " terminated");
  expect_same(a.truncated, b.truncated, at + " truncated");
  expect_same(a.env_id, b.env_id, at + " env_id");
  expect_same(a.final_obs, b.final_obs, at + " final_obs");
  expect_same(a.episode_return, b.episode_return, at + " episode_return");
  expect_same(a.episode_length, b.episode_length, at + " episode_length");
  EXPECT_EQ(a.episodes, b.episodes) << at;
}

// ---- the generator ----------------------------------------------------------------------------

TEST(TensorRng, DrawsAreEachEnvironmentsSplitmixStream) {
  const int64_t n = 6;
  TensorRng rng(n, 1234, torch::kCPU);
  // Draw c of environment i is the c-th output of splitmix64 started at env_seed(1234, i).
  std::vector<uint64_t> state(n);
  for (int64_t i = 0; i < n; ++i) state[i] = xlaunch::rl::env_seed(1234, i);
  const auto next = [&](int64_t i, double low, double high) {
    const double u = static_cast<double>(xlaunch::detail::splitmix64(state[i]) >> 11) * 0x1.0p-53;
    return static_cast<float>(low + (high - low) * u);
  };
  at::Tensor all = torch::ones({n}, torch::kBool);
  at::Tensor some = torch::tensor({false, true, false, true, true, false});
  at::Tensor a = rng.uniform(all, 3, -0.5, 2.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < 3; ++k) ASSERT_EQ(a[i][k].item<float>(), next(i, -0.5, 2.0)) << i << "," << k;
  at::Tensor b = rng.uniform(some, 2, 0.0, 1.0);
  for (int64_t i = 0; i < n; ++i) {
    if (!some[i].item<bool>()) continue;
    for (int64_t k = 0; k < 2; ++k) ASSERT_EQ(b[i][k].item<float>(), next(i, 0.0, 1.0)) << i << "," << k;
  }
  // Rows outside the mask drew nothing: their next draws are still their 4th and 5th.
  EXPECT_TRUE(torch::equal(rng.counters(), torch::tensor({3, 5, 3, 5, 5, 3}, torch::kLong)));
  at::Tensor c = rng.uniform(all, 1, 0.0, 1.0);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(c[i][0].item<float>(), next(i, 0.0, 1.0)) << i;
  // The rows' generator (what the fused step draws with) is the same stream.
  for (int64_t i = 0; i < n; ++i) {
    int64_t counter = rng.counters()[i].item<int64_t>();
    xlaunch::kernels::env_rows::Draws d{xlaunch::rl::env_seed(1234, i), &counter};
    ASSERT_EQ(d.uniform(-3.0, 3.0), next(i, -3.0, 3.0)) << i;
  }
}

// ---- fused and generic steps --------------------------------------------------------------------

struct Case {
  std::string id;
  Autoreset mode;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.id << (c.mode == Autoreset::NextStep ? " NextStep" : " SameStep"); }

// CartPole's odd environments balance the pole (to its time limit); the others act at random.
at::Tensor actions_for(const EnvSpec& spec, const at::Tensor& obs, Rng& rng) {
  at::Tensor a = random_actions(spec, obs.size(0), rng);
  if (spec.id != "CartPole-v1") return a;
  const float* o = obs.data_ptr<float>();
  for (int64_t i = 1; i < obs.size(0); i += 2)
    a[i] = static_cast<int64_t>(o[4 * i + 2] + 0.5f * o[4 * i + 3] + 0.05f * o[4 * i] + 0.1f * o[4 * i + 1] > 0);
  return a;
}

class FusedAndGeneric : public ::testing::TestWithParam<Case> {};

// Over 1,100 steps every environment ends episodes by termination and by its time limit (random
// actions reach the limits of Acrobot, the mountain cars and Pendulum; CartPole's odd environments
// balance to theirs).
TEST_P(FusedAndGeneric, AreBitwiseEqual) {
  const Case& c = GetParam();
  TensorEnvOptions o;
  o.env_id = c.id;
  o.num_envs = 37;
  o.seed = 99;
  o.autoreset = c.mode;
  TensorEnv fused(o);
  std::unique_ptr<TensorEnv> generic = xlaunch::rl::detail::TensorEnvAccess::generic(o);
  ASSERT_STREQ(fused.stepping(), "fused");
  ASSERT_STREQ(generic->stepping(), "tensor operations");
  EnvBatch x = fused.reset();
  expect_same_batch(x, generic->reset(), c.id + " reset");
  Rng rng(5);
  int64_t ended = 0, truncated = 0;
  const int steps = 1100;
  for (int t = 0; t < steps; ++t) {
    const at::Tensor a = actions_for(fused.spec(), x.obs, rng);
    x = fused.step(a);
    const EnvBatch y = generic->step(a);
    expect_same_batch(x, y, c.id + " step " + std::to_string(t));
    if (HasFatalFailure() || HasFailure()) return;
    ended += static_cast<int64_t>(x.episodes.size());
    truncated += x.truncated.sum().item<int64_t>();
  }
  const auto f = fused.finished(), g = generic->finished();
  EXPECT_EQ(f.episodes, g.episodes);
  EXPECT_EQ(static_cast<int64_t>(f.episodes.size()), ended);
  EXPECT_EQ(f.dropped, 0);
  EXPECT_GT(ended, 0) << c.id << ": no episode ended, the test tests too little";
  EXPECT_GT(truncated, 0) << c.id << ": no episode reached the time limit";
  EXPECT_EQ(fused.env_steps(), steps * o.num_envs);
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const std::string& id : xlaunch::rl::tensor_env_ids())
    for (Autoreset m : {Autoreset::NextStep, Autoreset::SameStep}) out.push_back({id, m});
  return out;
}

INSTANTIATE_TEST_SUITE_P(BuiltIn, FusedAndGeneric, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           std::string s = i.param.id + (i.param.mode == Autoreset::NextStep ? "_NextStep" : "_SameStep");
                           for (char& ch : s)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });

TEST(TensorEnv, AnEnvironmentsTrajectoryDoesNotDependOnTheirNumber) {
  for (const std::string& id : xlaunch::rl::tensor_env_ids()) {
    TensorEnvOptions few, many;
    few.env_id = many.env_id = id;
    few.seed = many.seed = 3;
    few.num_envs = 5;
    many.num_envs = 9000;  // more than one task of the parallel loop
    TensorEnv a(few), b(many);
    EnvBatch x = a.reset(), y = b.reset();
    Rng rng(11);
    for (int t = 0; t < 250; ++t) {
      ASSERT_TRUE(torch::equal(x.obs, y.obs.slice(0, 0, 5))) << id << " step " << t;
      ASSERT_TRUE(torch::equal(x.reward, y.reward.slice(0, 0, 5))) << id << " step " << t;
      ASSERT_TRUE(torch::equal(x.terminated, y.terminated.slice(0, 0, 5))) << id << " step " << t;
      const at::Tensor act = random_actions(b.spec(), many.num_envs, rng);
      x = a.step(act.slice(0, 0, 5));
      y = b.step(act);
    }
  }
}

TEST(TensorEnv, ResetDrawsGymnasiumsInitialStates) {
  TensorEnvOptions o;
  o.env_id = "CartPole-v1";
  o.num_envs = 2000;
  TensorEnv env(o);
  const at::Tensor obs = env.reset().obs;
  EXPECT_GE(obs.min().item<float>(), -0.05f);
  EXPECT_LT(obs.max().item<float>(), 0.05f);
  EXPECT_NEAR(obs.mean().item<float>(), 0.0f, 0.002f);
  o.env_id = "Pendulum-v1";
  TensorEnv p(o);
  const at::Tensor po = p.reset().obs;  // cos, sin of theta in [-pi, pi); theta_dot in [-1, 1)
  EXPECT_GE(po.select(1, 2).min().item<float>(), -1.0f);
  EXPECT_LT(po.select(1, 2).max().item<float>(), 1.0f);
  EXPECT_LT(po.select(1, 0).min().item<float>(), -0.99f);  // some start hanging down, some up
  EXPECT_GT(po.select(1, 0).max().item<float>(), 0.99f);
}

// The GPU's bookkeeping, run on the CPU (TensorEnvAccess::device_like): the device ring of finished
// episodes gives what the host list gives, overflow included; a bad action is stepped clamped,
// counted, and named by the next check.
TEST(TensorEnv, TheGpuBookkeepingKeepsTheSameEpisodesAndCountsBadActions) {
  using xlaunch::rl::detail::TensorEnvAccess;
  for (const std::string id : {"CartPole-v1", "Pendulum-v1"}) {
    for (bool generic : {false, true}) {
      const std::string what = id + (generic ? " generic" : " fused");
      TensorEnvOptions o;
      o.env_id = id;
      o.num_envs = 2000;  // a ring of 8,000: CartPole ends some 90 episodes a step at random
      o.seed = 21;
      TensorEnv host(o);
      std::unique_ptr<TensorEnv> dev = TensorEnvAccess::make(o, generic, /*device_like=*/true);
      host.reset();
      dev->reset();
      Rng rng(31);
      int64_t dropped = 0, kept = 0;
      for (int t = 0; t < 420; ++t) {
        const at::Tensor a = random_actions(host.spec(), o.num_envs, rng);
        const EnvBatch x = host.step(a), y = dev->step(a);
        ASSERT_TRUE(torch::equal(x.obs, y.obs)) << what << " step " << t;
        ASSERT_TRUE(torch::equal(x.episode_return, y.episode_return)) << what << " step " << t;
        ASSERT_TRUE(y.episodes.empty()) << what << ": the host list is the CPU's alone";
        if (t == 7 || t == 300 || t == 419) {  // CartPole overflows the ring between the first two reads
          const auto f = host.finished(), g = dev->finished();
          ASSERT_EQ(f.episodes, g.episodes) << what << " step " << t;
          ASSERT_EQ(f.dropped, g.dropped) << what << " step " << t;
          dropped += g.dropped;
          kept += static_cast<int64_t>(g.episodes.size());
        }
      }
      EXPECT_GT(kept, 0) << what;
      if (id == "CartPole-v1") EXPECT_GT(dropped, 0) << what << ": the ring never wrapped";
      // A bad action: no error at the step; stepped clamped; the next check names it, once.
      host.finished();
      dev->finished();
      at::Tensor bad = random_actions(host.spec(), o.num_envs, rng), clamped = bad.clone();
      if (id == "CartPole-v1") {
        bad[3] = 7, clamped[3] = 1;
        bad[9] = -1, clamped[9] = 0;
      } else {
        bad[3][0] = NAN, clamped[3][0] = 0;
        bad[9][0] = INFINITY, clamped[9][0] = 0;
      }
      const EnvBatch x = host.step(clamped), y = dev->step(bad);
      EXPECT_TRUE(torch::equal(x.obs, y.obs)) << what;
      EXPECT_NE(usage_error_of([&] { dev->check_actions(); }).find("2 action(s) since the last check were outside"),
                std::string::npos)
          << what;
      EXPECT_EQ(usage_error_of([&] { dev->check_actions(); }), "(no UsageError)") << what;
      dev->step(bad);
      EXPECT_NE(usage_error_of([&] { dev->finished(); }).find("2 action(s)"), std::string::npos) << what;
    }
  }
}

// ---- a user's environment, against the pool -----------------------------------------------------

// Ladder: Discrete(3) moves a position by -1, 0, +1 from 0; reward position / 2 + action; terminated
// at |position| >= 3; the environment truncates an episode itself when it climbs back to 0 with
// action 2; time limit 6. Deterministic, so the pool's generator and the tensor one do not matter.
EnvSpec ladder_spec() {
  EnvSpec s;
  s.id = "Ladder-v0";
  s.observation_space = Space::box({-3.f, 0.f}, {3.f, 2.f});
  s.action_space = Space::discrete(3);
  s.max_episode_steps = 6;
  return s;
}

class LadderEnv final : public xlaunch::rl::Env {
 public:
  const EnvSpec& spec() const override {
    static const EnvSpec s = ladder_spec();
    return s;
  }
  void reset(Rng&, float* obs) override {
    p_ = 0;
    obs[0] = 0, obs[1] = 0;
  }
  xlaunch::rl::StepResult step(const xlaunch::rl::Action& a, Rng&, float* obs) override {
    p_ += static_cast<float>(a.discrete - 1);
    obs[0] = p_, obs[1] = static_cast<float>(a.discrete);
    return {p_ / 2 + static_cast<float>(a.discrete), std::fabs(p_) >= 3, a.discrete == 2 && p_ == 0};
  }

 private:
  float p_ = 0;
};

class LadderTensors final : public TensorEnvironment {
 public:
  const EnvSpec& spec() const override {
    static const EnvSpec s = ladder_spec();
    return s;
  }
  void allocate(int64_t n, c10::Device device) override {
    p_ = torch::zeros({n}, torch::TensorOptions().device(device));
    a_ = torch::zeros({n}, torch::TensorOptions().device(device));
  }
  void reset(const at::Tensor& mask, TensorRng&) override {
    p_ = torch::where(mask, torch::zeros_like(p_), p_);
    a_ = torch::where(mask, torch::zeros_like(a_), a_);
  }
  TensorStep step(const at::Tensor& actions) override {
    a_ = actions.to(torch::kFloat);
    p_ = p_ + (a_ - 1);
    return {p_ / 2 + a_, p_.abs() >= 3, (actions == 2) & (p_ == 0)};
  }
  at::Tensor observe() override { return torch::stack({p_, a_}, 1); }

 private:
  at::Tensor p_, a_;
};

TEST(TensorEnv, AUsersEnvironmentStepsAsThePoolStepsIt) {
  for (Autoreset mode : {Autoreset::NextStep, Autoreset::SameStep}) {
    EnvPoolOptions po;
    po.factory = [] { return std::make_unique<LadderEnv>(); };
    po.num_envs = 13;
    po.num_threads = 2;
    po.autoreset = mode;
    EnvPool pool(po);
    TensorEnvOptions to;
    to.factory = [] { return std::make_unique<LadderTensors>(); };
    to.num_envs = 13;
    to.autoreset = mode;
    TensorEnv env(to);
    ASSERT_STREQ(env.stepping(), "tensor operations");
    const std::string m = mode == Autoreset::NextStep ? "NextStep" : "SameStep";
    EnvBatch x = pool.reset(), y = env.reset();
    Rng rng(17);
    int64_t terminated = 0, truncated = 0;
    for (int t = 0; t <= 300; ++t) {
      const std::string at = m + " step " + std::to_string(t);
      ASSERT_TRUE(torch::equal(x.obs, y.obs)) << at << ": " << x.obs << y.obs;
      ASSERT_TRUE(torch::equal(x.reward, y.reward)) << at;
      ASSERT_TRUE(torch::equal(x.terminated, y.terminated)) << at;
      ASSERT_TRUE(torch::equal(x.truncated, y.truncated)) << at;
      ASSERT_TRUE(torch::equal(x.env_id, y.env_id)) << at;
      if (mode == Autoreset::SameStep) ASSERT_TRUE(torch::equal(x.final_obs, y.final_obs)) << at;
      ASSERT_EQ(x.episodes, y.episodes) << at;
      for (const Episode& e : y.episodes) {  // the batch's tensors say the same as its list
        ASSERT_EQ(y.episode_length[e.env_id].item<int64_t>(), e.length) << at;
        ASSERT_EQ(y.episode_return[e.env_id].item<float>(), static_cast<float>(e.ret)) << at;
      }
      ASSERT_EQ(y.episode_length.gt(0).sum().item<int64_t>(), static_cast<int64_t>(y.episodes.size())) << at;
      terminated += y.terminated.sum().item<int64_t>();
      truncated += y.truncated.sum().item<int64_t>();
      const at::Tensor a = random_actions(env.spec(), 13, rng);
      x = pool.step(a);
      y = env.step(a);
    }
    EXPECT_GT(terminated, 50) << m;
    EXPECT_GT(truncated, 50) << m;
    EXPECT_EQ(pool.env_steps(), env.env_steps()) << m;
  }
}

TEST(TensorEnv, ThePoolsTensorBackendIsTensorEnv) {
  EnvPoolOptions po;
  po.env_id = "Acrobot-v1";
  po.num_envs = 21;
  po.seed = 8;
  po.backend = EnvBackend::Tensor;
  EnvPool pool(po);
  TensorEnvOptions to;
  to.env_id = "Acrobot-v1";
  to.num_envs = 21;
  to.seed = 8;
  TensorEnv env(to);
  EXPECT_EQ(pool.batch_size(), 21);
  expect_same_batch(pool.reset(), env.reset(), "reset");
  Rng rng(2);
  for (int t = 0; t < 50; ++t) {
    const at::Tensor a = random_actions(env.spec(), 21, rng);
    expect_same_batch(pool.step(a), env.step(a), "step " + std::to_string(t));
  }
  EXPECT_EQ(pool.env_steps(), env.env_steps());
}

// docs/rl.md's example of a user's tensor environment, as printed there.
struct Corridor : xlaunch::rl::TensorEnvironment {
  Corridor() {
    spec_.id = "Corridor-v0";
    spec_.observation_space = xlaunch::rl::Space::box({0.f}, {10.f});
    spec_.action_space = xlaunch::rl::Space::discrete(2);  // left, right
    spec_.max_episode_steps = 100;
  }
  const xlaunch::rl::EnvSpec& spec() const override { return spec_; }
  void allocate(int64_t n, c10::Device device) override {
    pos_ = torch::zeros({n}, torch::TensorOptions().device(device));
  }
  void reset(const at::Tensor& mask, xlaunch::rl::TensorRng& rng) override {
    const at::Tensor start = rng.uniform(mask, 1, 0, 5).squeeze(1).floor();  // 0..4
    pos_ = torch::where(mask, start, pos_);
  }
  xlaunch::rl::TensorStep step(const at::Tensor& actions) override {
    pos_ = (pos_ + actions.to(torch::kFloat) * 2 - 1).clamp_min(0);
    const at::Tensor goal = pos_ == 10;
    return {goal.to(torch::kFloat), goal, {}};
  }
  at::Tensor observe() override { return pos_.unsqueeze(1).clone(); }
  xlaunch::rl::EnvSpec spec_;
  at::Tensor pos_;
};

TEST(TensorEnv, TheDocumentedCorridorRuns) {
  TensorEnvOptions o;
  o.factory = [] { return std::make_unique<Corridor>(); };
  o.num_envs = 50;
  o.seed = 4;
  TensorEnv env(o);
  const at::Tensor start = env.reset().obs;
  EXPECT_TRUE(torch::equal(start, start.floor()));
  EXPECT_GE(start.min().item<float>(), 0.f);
  EXPECT_LE(start.max().item<float>(), 4.f);
  EXPECT_GT(start.max().item<float>(), start.min().item<float>());  // the environments start apart
  // Always right: each episode ends at the goal after 10 - start steps, with return 1.
  const at::Tensor right = torch::ones({50}, torch::kLong);
  for (int t = 0; t < 10; ++t) env.step(right);
  const auto f = env.finished();
  ASSERT_EQ(static_cast<int64_t>(f.episodes.size()), 50);
  for (const Episode& e : f.episodes) {
    EXPECT_EQ(e.ret, 1.0);
    EXPECT_EQ(e.length, 10 - static_cast<int64_t>(start[e.env_id][0].item<float>())) << e.env_id;
  }
}

// ---- bad input ------------------------------------------------------------------------------------


TEST(TensorEnvErrors, NameTheCauseAndStepNothing) {
  TensorEnvOptions o;
  o.env_id = "CartPol-v1";
  EXPECT_NE(usage_error_of([&] { TensorEnv e(o); }).find("no built-in tensor environment 'CartPol-v1'; the built-in ones are "
                                                   "CartPole-v1, Acrobot-v1, MountainCar-v0, MountainCarContinuous-v0, "
                                                   "Pendulum-v1"),
            std::string::npos);
  o.env_id = "CartPole-v1";
  o.num_envs = 0;
  EXPECT_NE(usage_error_of([&] { TensorEnv e(o); }).find("num_envs is 0"), std::string::npos);
  o.num_envs = 4;
  TensorEnv env(o);
  EXPECT_NE(usage_error_of([&] { env.step(torch::zeros({4}, torch::kLong)); }).find("call reset() first"), std::string::npos);
  const EnvBatch first = env.reset();
  EXPECT_NE(usage_error_of([&] { env.step(torch::zeros({3}, torch::kLong)); })
                .find("actions are Long [3]; Discrete(2) takes an integer tensor [4]"),
            std::string::npos);
  EXPECT_NE(usage_error_of([&] { env.step(torch::zeros({4}, torch::kFloat)); }).find("actions are Float [4]"),
            std::string::npos);
  EXPECT_NE(usage_error_of([&] { env.step(torch::tensor({0, 1, 2, 0}, torch::kLong)); })
                .find("the action of environment 2 is 2, outside Discrete(2): expected 0..1 (no environment stepped)"),
            std::string::npos);
  EXPECT_EQ(env.env_steps(), 0);
  // Nothing stepped: the next good step is the first step of a fresh environment.
  TensorEnv fresh(o);
  fresh.reset();
  const at::Tensor a = torch::tensor({0, 1, 1, 0}, torch::kLong);
  EXPECT_TRUE(torch::equal(env.step(a).obs, fresh.step(a).obs));

  TensorEnvOptions p;
  p.env_id = "Pendulum-v1";
  p.num_envs = 3;
  TensorEnv pend(p);
  pend.reset();
  EXPECT_NE(usage_error_of([&] { pend.step(torch::tensor({{0.f}, {NAN}, {1.f}})); })
                .find("the action of environment 1 holds nan at element 0: actions of Box(1,) [-2, 2] must be finite"),
            std::string::npos);
  EXPECT_NE(usage_error_of([&] { pend.step(torch::zeros({3}, torch::kFloat)); }).find("takes a floating-point tensor [3, 1]"),
            std::string::npos);
}

TEST(TensorEnvErrors, ThePoolsTensorBackendRefusesWhatItCannotDo) {
  EnvPoolOptions o;
  o.env_id = "CartPole-v1";
  o.num_envs = 8;
  o.backend = EnvBackend::Tensor;
  EnvPool pool(o);
  EXPECT_NE(usage_error_of([&] { pool.async_reset(); }).find("EnvPool::async_reset: the tensor backend"), std::string::npos);
  EXPECT_NE(usage_error_of([&] { pool.recv(); }).find("use reset() and step()"), std::string::npos);
  EnvPoolOptions b = o;
  b.batch_size = 4;
  EXPECT_NE(usage_error_of([&] { EnvPool p(b); }).find("backend Tensor is synchronous: batch_size is 4"), std::string::npos);
  EnvPoolOptions t = o;
  t.num_threads = 2;
  EXPECT_NE(usage_error_of([&] { EnvPool p(t); }).find("has no threads of its own (num_threads 2"), std::string::npos);
  EnvPoolOptions f = o;
  f.env_id.clear();
  f.factory = [] { return std::make_unique<LadderEnv>(); };
  EXPECT_NE(usage_error_of([&] { EnvPool p(f); }).find("write a TensorEnvironment"), std::string::npos);
}

TEST(TensorEnvErrors, AUsersStepOfTheWrongShapeIsNamed) {
  class Broken final : public TensorEnvironment {
   public:
    const EnvSpec& spec() const override {
      static const EnvSpec s = ladder_spec();
      return s;
    }
    void allocate(int64_t n, c10::Device) override { n_ = n; }
    void reset(const at::Tensor&, TensorRng&) override {}
    TensorStep step(const at::Tensor&) override { return {torch::zeros({n_}), torch::zeros({n_ + 1}, torch::kBool), {}}; }
    at::Tensor observe() override { return torch::zeros({n_, 2}); }

   private:
    int64_t n_ = 0;
  };
  TensorEnvOptions o;
  o.factory = [] { return std::make_unique<Broken>(); };
  o.num_envs = 3;
  TensorEnv env(o);
  env.reset();
  EXPECT_NE(usage_error_of([&] { env.step(torch::zeros({3}, torch::kLong)); })
                .find("the environment's step returned terminated as Bool [4] on cpu; return Bool [3] on cpu"),
            std::string::npos);
}

}  // namespace
