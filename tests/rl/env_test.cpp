// Space, Rng, env_seed and the registry of env.h, with literal answers; the classic-control
// environments' spaces, reset distributions and the edges of their steps (their dynamics are
// compared with Gymnasium's in gym_equivalence_test).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "rl/classic_control.h"
#include "xlaunch/error.h"
#include "xlaunch/rl/env.h"

namespace xlaunch::rl {
namespace {

const float kInf = std::numeric_limits<float>::infinity();

TEST(Space, Discrete) {
  const Space s = Space::discrete(3);
  EXPECT_EQ(s.kind, Space::Kind::Discrete);
  EXPECT_EQ(s.n, 3);
  EXPECT_TRUE(s.shape.empty());
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(s.describe(), "Discrete(3)");
  EXPECT_THROW(Space::discrete(0), UsageError);
}

TEST(Space, Box) {
  const Space s = Space::box({-1, -kInf, 0.5f}, {1, kInf, 8});
  EXPECT_EQ(s.kind, Space::Kind::Box);
  EXPECT_EQ(s.shape, std::vector<int64_t>{3});
  EXPECT_EQ(s.numel(), 3);
  EXPECT_EQ(s.describe(), "Box(3,) [-1, 1] [-inf, inf] [0.5, 8]");
  EXPECT_EQ(Space::box(std::vector<float>(9, 0), std::vector<float>(9, 1)).describe(),
            "Box(9,) [0, 1] [0, 1] [0, 1] [0, 1] [0, 1] [0, 1] [0, 1] [0, 1] ...");
}

TEST(Space, BoxRejectsMismatchedOrInvertedBounds) {
  try {
    Space::box({0, 0}, {1});
    FAIL() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("low has 2 bounds and high 1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Space::box({}, {}), UsageError);
  try {
    Space::box({0, 2}, {1, 1});
    FAIL() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("element 1"), std::string::npos) << e.what();
  }
}

// The sequences below come from an independent transcription of splitmix64 and xoshiro256** 1.0
// (their authors' C); a change of generator, seeding or uniform() changes them.
TEST(Rng, FixedSequence) {
  Rng zero(0);
  EXPECT_EQ(zero.next(), 0x99ec5f36cb75f2b4ull);
  EXPECT_EQ(zero.next(), 0xbf6e1f784956452aull);
  EXPECT_EQ(zero.next(), 0x1a5f849d4933e6e0ull);
  EXPECT_EQ(zero.next(), 0x6aa594f1262d2d2cull);
  Rng r42(42);
  EXPECT_EQ(r42.next(), 0x15780b2e0c2ec716ull);
  EXPECT_EQ(r42.next(), 0x6104d9866d113a7eull);
}

TEST(Rng, Uniform) {
  Rng r(7);
  EXPECT_EQ(r.uniform(-1, 1), 0.4011529643593792);
  EXPECT_EQ(r.uniform(-1, 1), -0.44249754105243144);
  EXPECT_EQ(r.uniform(-1, 1), 0.6792549237528396);
  // uniform(0, 1) is the top 53 bits of next(), scaled.
  Rng a(9), b(9);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(a.uniform(0, 1), static_cast<double>(b.next() >> 11) * 0x1.0p-53);
  double lo = 1, hi = -1;
  for (int i = 0; i < 100000; ++i) {
    const double u = a.uniform(-0.05, 0.05);
    lo = std::min(lo, u), hi = std::max(hi, u);
  }
  EXPECT_GE(lo, -0.05);
  EXPECT_LT(hi, 0.05);
  EXPECT_LT(lo, -0.0499);  // and it covers the range
  EXPECT_GT(hi, 0.0499);
}

TEST(EnvSeed, Literal) {
  EXPECT_EQ(env_seed(0, 0), 0xa706dd2f4d197e6full);
  EXPECT_EQ(env_seed(0, 1), 0x08b4fda8c892b50eull);
  EXPECT_EQ(env_seed(1, 0), 0x5e41ab087439611eull);
  EXPECT_EQ(env_seed(123, 4), 0xe7beb69cf093afc3ull);
}

TEST(EnvSeed, PoolsOfNearbySeedsShareNone) {
  std::set<uint64_t> seen;
  for (uint64_t seed = 0; seed < 8; ++seed) {
    for (int64_t i = 0; i < 1024; ++i) seen.insert(env_seed(seed, i));
  }
  EXPECT_EQ(seen.size(), 8u * 1024u);
}

TEST(Registry, ClassicControlIsBuiltIn) {
  const std::vector<std::string> ids = registered_envs();
  ASSERT_GE(ids.size(), 5u);
  EXPECT_EQ(std::vector<std::string>(ids.begin(), ids.begin() + 5),
            (std::vector<std::string>{"CartPole-v1", "Acrobot-v1", "MountainCar-v0", "Pendulum-v1",
                                      "MountainCarContinuous-v0"}));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(make_env(ids[i])->spec().id, ids[i]);
}

TEST(Registry, UnknownIdNamesTheRegisteredOnes) {
  try {
    make_env("CartPole-v0");
    FAIL() << "no error";
  } catch (const UsageError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'CartPole-v0'"), std::string::npos) << m;
    EXPECT_NE(m.find("CartPole-v1, Acrobot-v1, MountainCar-v0, Pendulum-v1"), std::string::npos) << m;
    EXPECT_NE(m.find("register_env"), std::string::npos) << m;
  }
}

// A user's environment: counts its steps.
class Counter : public Env {
 public:
  const EnvSpec& spec() const override {
    static const EnvSpec s{"EnvTest-Counter-v0", Space::box({0}, {1000}), Space::discrete(2), 10};
    return s;
  }
  void reset(Rng&, float* obs) override { obs[0] = n_ = 0; }
  StepResult step(const Action&, Rng&, float* obs) override {
    obs[0] = static_cast<float>(++n_);
    return {1.0, false, false};
  }

 private:
  int n_ = 0;
};

TEST(Registry, RegistersAUsersEnvOnceOnly) {
  register_env("EnvTest-Counter-v0", [] { return std::make_unique<Counter>(); });
  const std::vector<std::string> ids = registered_envs();
  EXPECT_EQ(ids.back(), "EnvTest-Counter-v0");
  std::unique_ptr<Env> env = make_env("EnvTest-Counter-v0");
  Rng rng(1);
  float obs = -1;
  env->reset(rng, &obs);
  env->step(Action{}, rng, &obs);
  EXPECT_EQ(obs, 1.0f);
  try {
    register_env("EnvTest-Counter-v0", [] { return std::make_unique<Counter>(); });
    FAIL() << "no error";
  } catch (const UsageError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("already registered as 'EnvTest-Counter-v0'"), std::string::npos) << m;
    EXPECT_NE(m.find("MountainCarContinuous-v0, EnvTest-Counter-v0"), std::string::npos) << m;
  }
  EXPECT_THROW(register_env("CartPole-v1", [] { return std::make_unique<Counter>(); }), UsageError);
  EXPECT_THROW(register_env("", [] { return std::make_unique<Counter>(); }), UsageError);
  EXPECT_THROW(register_env("EnvTest-Empty-v0", nullptr), UsageError);
  EXPECT_EQ(registered_envs().size(), ids.size());
}

void expect_box(const Space& s, const std::vector<float>& low, const std::vector<float>& high) {
  ASSERT_EQ(s.kind, Space::Kind::Box);
  EXPECT_EQ(s.low, low);
  EXPECT_EQ(s.high, high);
}

// Gymnasium's bounds, as its float32 arrays hold them.
TEST(ClassicControl, Specs) {
  const EnvSpec& cartpole = make_env("CartPole-v1")->spec();
  expect_box(cartpole.observation_space, {-4.8f, -kInf, -0.41887903f, -kInf}, {4.8f, kInf, 0.41887903f, kInf});
  EXPECT_EQ(cartpole.action_space.n, 2);
  EXPECT_EQ(cartpole.max_episode_steps, 500);
  const EnvSpec& acrobot = make_env("Acrobot-v1")->spec();
  expect_box(acrobot.observation_space, {-1, -1, -1, -1, -12.566371f, -28.274334f},
             {1, 1, 1, 1, 12.566371f, 28.274334f});
  EXPECT_EQ(acrobot.action_space.n, 3);
  EXPECT_EQ(acrobot.max_episode_steps, 500);
  const EnvSpec& car = make_env("MountainCar-v0")->spec();
  expect_box(car.observation_space, {-1.2f, -0.07f}, {0.6f, 0.07f});
  EXPECT_EQ(car.action_space.n, 3);
  EXPECT_EQ(car.max_episode_steps, 200);
  const EnvSpec& pendulum = make_env("Pendulum-v1")->spec();
  expect_box(pendulum.observation_space, {-1, -1, -8}, {1, 1, 8});
  expect_box(pendulum.action_space, {-2}, {2});
  EXPECT_EQ(pendulum.max_episode_steps, 200);
  const EnvSpec& continuous = make_env("MountainCarContinuous-v0")->spec();
  expect_box(continuous.observation_space, {-1.2f, -0.07f}, {0.6f, 0.07f});
  expect_box(continuous.action_space, {-1}, {1});
  EXPECT_EQ(continuous.max_episode_steps, 999);
}

// Reset draws Gymnasium's initial distributions from the given generator, in the state's order.
TEST(ClassicControl, ResetDrawsFromTheRng) {
  float obs[6];
  Rng rng(5), same(5);
  CartPole cartpole;
  cartpole.reset(rng, obs);
  for (int i = 0; i < 4; ++i) {
    const double want = same.uniform(-0.05, 0.05);
    EXPECT_EQ(cartpole.state()[i], want);
    EXPECT_EQ(obs[i], static_cast<float>(want));
  }
  Acrobot acrobot;  // float32 values, as Gymnasium's .astype(np.float32)
  acrobot.reset(rng, obs);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(acrobot.state()[i], static_cast<float>(same.uniform(-0.1, 0.1)));
  EXPECT_EQ(obs[0], static_cast<float>(std::cos(acrobot.state()[0])));
  MountainCar car;
  car.reset(rng, obs);
  EXPECT_EQ(car.state(), (std::vector<double>{same.uniform(-0.6, -0.4), 0.0}));
  Pendulum pendulum;
  pendulum.reset(rng, obs);
  const double th = same.uniform(-M_PI, M_PI);
  EXPECT_EQ(pendulum.state(), (std::vector<double>{th, same.uniform(-1, 1)}));
}

TEST(ClassicControl, CartPoleRewardsTheTerminatingStepOnly) {
  CartPole env;
  Rng rng(0);
  float obs[4];
  env.set_state({0, 0, 0.3, 0});  // past the 12 degree threshold
  StepResult r = env.step(Action{1}, rng, obs);
  EXPECT_TRUE(r.terminated);
  EXPECT_EQ(r.reward, 1.0);
  r = env.step(Action{1}, rng, obs);  // stepped after termination, as Gymnasium: 0
  EXPECT_TRUE(r.terminated);
  EXPECT_EQ(r.reward, 0.0);
  env.set_state({0, 0, 0.3, 0});  // a new episode
  EXPECT_EQ(env.step(Action{1}, rng, obs).reward, 1.0);
}

TEST(ClassicControl, PendulumClipsItsAction) {
  Pendulum a, b;
  Rng rng(0);
  float obs_a[3], obs_b[3];
  a.set_state({1.0, 0.5});
  b.set_state({1.0, 0.5});
  const float over = 5.0f, edge = 2.0f;
  const StepResult ra = a.step(Action{0, &over}, rng, obs_a);
  const StepResult rb = b.step(Action{0, &edge}, rng, obs_b);
  EXPECT_EQ(a.state(), b.state());
  EXPECT_EQ(ra.reward, rb.reward);
  EXPECT_FALSE(ra.terminated);
}

TEST(ClassicControl, SetStateChecksTheSize) {
  EXPECT_THROW(CartPole().set_state({0, 0}), UsageError);
  EXPECT_THROW(Acrobot().set_state({0, 0, 0}), UsageError);
  EXPECT_THROW(MountainCar().set_state({0}), UsageError);
  EXPECT_THROW(Pendulum().set_state({0, 0, 0}), UsageError);
}

}  // namespace
}  // namespace xlaunch::rl
