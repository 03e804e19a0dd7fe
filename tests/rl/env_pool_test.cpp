// The pool's trajectories against the single-process reference (pool_test_envs.h): the same
// environments stepped one by one, for 1, 2 and 4 threads, synchronous and asynchronous, both
// autoreset modes; episode statistics and env_steps() with them.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "pool_test_envs.h"
#include "profile/step_clock.h"
#include "xlaunch/rl/env_pool.h"

namespace {

using namespace xlaunch::test;
using xlaunch::rl::Autoreset;
using xlaunch::rl::EnvBatch;
using xlaunch::rl::EnvFactory;
using xlaunch::rl::EnvPool;
using xlaunch::rl::EnvPoolOptions;
using xlaunch::rl::Episode;

enum class Kind { Walk, Drift };

const char* name(Kind k) { return k == Kind::Walk ? "Walk" : "Drift"; }

EnvFactory factory(Kind k) {
  if (k == Kind::Walk) return [] { return std::make_unique<WalkEnv>(); };
  return [] { return std::make_unique<DriftEnv>(); };
}

// One environment's action as values: the reference steps with it, the pool gets it in a tensor.
struct ActionValue {
  int64_t discrete = 0;
  std::vector<float> box;
  Action action() const {
    Action a;
    a.discrete = discrete;
    a.box = box.data();
    return a;
  }
};

// The actions as a tensor, in one of the accepted forms (`form` picks dtype and shape).
at::Tensor to_tensor(Kind k, const std::vector<ActionValue>& v, int form) {
  const auto n = static_cast<int64_t>(v.size());
  if (k == Kind::Walk) {
    std::vector<int64_t> d;
    for (const auto& a : v) d.push_back(a.discrete);
    at::Tensor t = torch::tensor(d, torch::kLong);
    if (form % 3 == 1) t = t.to(torch::kInt).view({n, 1});
    if (form % 3 == 2) t = t.to(torch::kByte);
    return t;
  }
  std::vector<float> f;
  for (const auto& a : v) f.insert(f.end(), a.box.begin(), a.box.end());
  at::Tensor t = torch::tensor(f, torch::kFloat).view({n, 2});
  return form % 2 ? t.to(torch::kDouble) : t;
}

// Synchronous: a function of the step and the environment.
ActionValue scripted(Kind k, int64_t t, int64_t i) {
  ActionValue a;
  if (k == Kind::Walk)
    a.discrete = (t * 7 + i * 3) % 3;
  else
    a.box = {1.2f * static_cast<float>(std::sin(t + i)), static_cast<float>(std::cos(2.0 * t - i))};
  return a;
}

// Asynchronous: a function of the environment and its own last observation only, so each
// environment's trajectory is the same whatever order the environments come back in.
ActionValue policy(Kind k, int64_t i, const std::vector<float>& obs) {
  ActionValue a;
  if (k == Kind::Walk)
    a.discrete = (static_cast<int64_t>(std::floor(std::fabs(obs[0]) * 10)) + i) % 3;
  else
    a.box = {std::tanh(2 * obs[0] + 0.1f * static_cast<float>(i)), -obs[1]};
  return a;
}

// Every terminated and truncated row has its episode in `episodes`, in row order.
void expect_episodes_match_rows(const EnvBatch& b) {
  std::vector<int64_t> ended;
  for (int64_t r = 0; r < b.env_id.size(0); ++r)
    if (b.terminated[r].item<bool>() || b.truncated[r].item<bool>()) ended.push_back(b.env_id[r].item<int64_t>());
  std::vector<int64_t> listed;
  for (const Episode& e : b.episodes) listed.push_back(e.env_id);
  EXPECT_EQ(listed, ended);
}

TEST(EnvPoolSync, EqualsTheSameEnvironmentsSteppedOneByOne) {
  const int64_t n = 7, steps = 60;
  const uint64_t seed = 1234;
  for (Kind k : {Kind::Walk, Kind::Drift})
    for (Autoreset mode : {Autoreset::NextStep, Autoreset::SameStep})
      for (int threads : {1, 2, 4}) {
        SCOPED_TRACE(std::string(name(k)) + (mode == Autoreset::SameStep ? " SameStep" : " NextStep") +
                     " threads=" + std::to_string(threads));
        EnvPoolOptions o;
        o.factory = factory(k);
        o.num_envs = n;
        o.num_threads = threads;
        o.seed = seed;
        o.autoreset = mode;
        EnvPool pool(o);
        ASSERT_EQ(pool.num_threads(), threads);
        ASSERT_EQ(pool.batch_size(), n);
        std::vector<Reference> refs;
        for (int64_t i = 0; i < n; ++i) refs.emplace_back(o.factory, seed, i, mode);

        EnvBatch b = pool.reset();
        ASSERT_EQ(b.obs.sizes(), (at::IntArrayRef{n, k == Kind::Walk ? 3 : 2}));
        ASSERT_EQ(b.final_obs.defined(), mode == Autoreset::SameStep);
        EXPECT_TRUE(b.episodes.empty());
        for (int64_t i = 0; i < n; ++i) {
          EXPECT_EQ(row_of(b, i), refs[i].reset()) << "env " << i;
          EXPECT_EQ(b.env_id[i].item<int64_t>(), i);
        }
        int terminated = 0, truncated = 0;
        for (int64_t t = 0; t < steps; ++t) {
          std::vector<ActionValue> acts;
          for (int64_t i = 0; i < n; ++i) acts.push_back(scripted(k, t, i));
          const EnvBatch prev = b;
          b = pool.step(to_tensor(k, acts, static_cast<int>(t)));
          EXPECT_NE(b.obs.data_ptr(), prev.obs.data_ptr()) << "each batch is new storage";
          std::vector<Episode> expected;
          for (int64_t i = 0; i < n; ++i) {
            const size_t before = refs[i].episodes.size();
            const Row want = refs[i].step(acts[i].action());
            ASSERT_EQ(row_of(b, i), want) << "env " << i << " step " << t;
            ASSERT_EQ(b.env_id[i].item<int64_t>(), i);
            if (refs[i].episodes.size() > before) expected.push_back(refs[i].episodes.back());
            terminated += want.terminated;
            truncated += want.truncated;
          }
          EXPECT_EQ(b.episodes, expected) << "step " << t;
          expect_episodes_match_rows(b);
          EXPECT_EQ(pool.env_steps(), (t + 1) * n);
        }
        EXPECT_GT(terminated, 5) << "the test must see episodes terminate";
        EXPECT_GT(truncated, 5) << "and be truncated";
      }
}

struct Trajectories {
  std::vector<std::vector<Row>> rows;          // per environment, in the order it stepped
  std::vector<std::vector<Episode>> episodes;  // per environment
  int64_t stepped = 0;                         // rows that were steps (not the first reset)
};

Trajectories run_async(Kind k, Autoreset mode, int threads, int64_t n, int64_t batch, uint64_t seed, int rounds) {
  EnvPoolOptions o;
  o.factory = factory(k);
  o.num_envs = n;
  o.batch_size = batch;
  o.num_threads = threads;
  o.seed = seed;
  o.autoreset = mode;
  EnvPool pool(o);
  Trajectories tr;
  tr.rows.resize(n);
  tr.episodes.resize(n);
  pool.async_reset();
  for (int round = 0; round < rounds; ++round) {
    const EnvBatch b = pool.recv();
    EXPECT_EQ(b.env_id.size(0), batch);
    expect_episodes_match_rows(b);
    for (const Episode& e : b.episodes) tr.episodes[e.env_id].push_back(e);
    std::vector<ActionValue> acts;
    for (int64_t r = 0; r < batch; ++r) {
      const int64_t i = b.env_id[r].item<int64_t>();
      tr.stepped += tr.rows[i].empty() ? 0 : 1;
      tr.rows[i].push_back(row_of(b, r));
      acts.push_back(policy(k, i, tr.rows[i].back().obs));
    }
    EXPECT_EQ(pool.env_steps(), tr.stepped);
    pool.send(to_tensor(k, acts, round), b.env_id);
  }
  return tr;  // destroyed with every environment in flight
}

TEST(EnvPoolAsync, EachEnvironmentsTrajectoryEqualsTheReference) {
  const uint64_t seed = 99;
  for (Kind k : {Kind::Walk, Kind::Drift})
    for (Autoreset mode : {Autoreset::NextStep, Autoreset::SameStep})
      for (int threads : {1, 2, 4})
        for (int64_t batch : {3, 8}) {
          const int64_t n = 8;
          SCOPED_TRACE(std::string(name(k)) + (mode == Autoreset::SameStep ? " SameStep" : " NextStep") +
                       " threads=" + std::to_string(threads) + " batch=" + std::to_string(batch));
          const Trajectories tr = run_async(k, mode, threads, n, batch, seed, 120);
          int ended = 0;
          for (int64_t i = 0; i < n; ++i) {
            ASSERT_GE(tr.rows[i].size(), 2u) << "env " << i << " stepped";
            Reference ref(factory(k), seed, i, mode);
            EXPECT_EQ(tr.rows[i][0], ref.reset()) << "env " << i;
            for (size_t s = 1; s < tr.rows[i].size(); ++s) {
              const Row want = ref.step(policy(k, i, ref.last_obs()).action());
              ASSERT_EQ(tr.rows[i][s], want) << "env " << i << " row " << s;
            }
            // The pool reports episodes as they end; the reference's list is the same, in order.
            ASSERT_EQ(tr.episodes[i].size(), ref.episodes.size()) << "env " << i;
            for (size_t e = 0; e < ref.episodes.size(); ++e) EXPECT_EQ(tr.episodes[i][e], ref.episodes[e]);
            ended += static_cast<int>(ref.episodes.size());
          }
          EXPECT_GT(ended, 10) << "the test must see episodes end";
        }
}

TEST(EnvPoolAsync, TrajectoriesDoNotDependOnThreads) {
  const Trajectories one = run_async(Kind::Walk, Autoreset::NextStep, 1, 16, 5, 7, 200);
  const Trajectories four = run_async(Kind::Walk, Autoreset::NextStep, 4, 16, 5, 7, 200);
  for (int64_t i = 0; i < 16; ++i) {
    const size_t common = std::min(one.rows[i].size(), four.rows[i].size());
    ASSERT_GT(common, 10u);
    for (size_t s = 0; s < common; ++s) ASSERT_EQ(one.rows[i][s], four.rows[i][s]) << "env " << i << " row " << s;
  }
}

TEST(EnvPoolSync, AsynchronousCallsOnASynchronousPoolContinueItsEpisodes) {
  // batch_size == num_envs: step() and send/recv both work; each environment keeps its trajectory.
  const int64_t n = 4;
  EnvPoolOptions o;
  o.factory = factory(Kind::Walk);
  o.num_envs = n;
  o.num_threads = 2;
  o.seed = 5;
  EnvPool pool(o);
  std::vector<Reference> refs;
  for (int64_t i = 0; i < n; ++i) refs.emplace_back(o.factory, 5, i, Autoreset::NextStep);
  EnvBatch b = pool.reset();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(row_of(b, i), refs[i].reset());
  for (int64_t t = 0; t < 20; ++t) {
    std::vector<ActionValue> acts;
    for (int64_t i = 0; i < n; ++i) acts.push_back(scripted(Kind::Walk, t, i));
    if (t % 2 == 0) {
      b = pool.step(to_tensor(Kind::Walk, acts, 0));
    } else {
      pool.send(to_tensor(Kind::Walk, acts, 0), torch::arange(n, torch::kLong));
      b = pool.recv();
    }
    for (int64_t r = 0; r < n; ++r) {
      const int64_t i = b.env_id[r].item<int64_t>();
      ASSERT_EQ(row_of(b, r), refs[i].step(acts[i].action())) << "env " << i << " step " << t;
    }
  }
  EXPECT_EQ(pool.env_steps(), 20 * n);
}

// The training thread's time in reset/step/recv is the step's data wait in the utilization report.
TEST(EnvPoolProfile, WaitsCountAsDataWaitAndStepsAsSamples) {
  namespace profile = xlaunch::profile;
  profile::ClockSettings c;  // no status directory: the stats stay in this process
  profile::start(c);
  class SleepyWalk : public WalkEnv {  // each step sleeps 2 ms: the waits below last at least that
   public:
    xlaunch::rl::StepResult step(const Action& a, Rng& rng, float* obs) override {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      return WalkEnv::step(a, rng, obs);
    }
  };
  profile::step_done(0);  // what other tests' pools counted is folded in before, not after
  const uint64_t before = profile::stats().total.phase_ns[profile::kDataWait];
  const uint64_t samples_before = profile::stats().total.samples;
  int64_t env_steps = 0;
  for (int64_t batch : {0, 2}) {
    EnvPoolOptions o;
    o.factory = [] { return std::make_unique<SleepyWalk>(); };
    o.num_envs = 4;
    o.batch_size = batch;
    o.num_threads = 2;
    EnvPool pool(o);
    if (batch == 0) {
      pool.reset();
      // The caller steps chunk 0 (two environments) itself: >= 4 ms of each step() is its own.
      for (int t = 0; t < 3; ++t) pool.step(torch::zeros({4}, torch::kLong));
    } else {
      pool.async_reset();
      for (int t = 0; t < 2; ++t) pool.send(torch::zeros({2}, torch::kLong), pool.recv().env_id);
      for (int t = 0; t < 3; ++t) pool.send(torch::zeros({2}, torch::kLong), pool.recv().env_id);
    }
    env_steps += pool.env_steps();
  }
  profile::step_done(1);
  const uint64_t waited = profile::stats().total.phase_ns[profile::kDataWait] - before;
  EXPECT_GE(waited, 3u * 4'000'000u) << "the pool's calls are data wait";
  // And the environment steps handed over are its samples (resets are not steps): 3 synchronous
  // steps of 4, and some of the asynchronous batches' rows.
  EXPECT_GE(env_steps, 3 * 4 + 2);
  EXPECT_EQ(profile::stats().total.samples - samples_before, static_cast<uint64_t>(env_steps));
}

}  // namespace
