// The classic-control set in the pool, by id (the determinism check): with one seed, each
// environment's trajectory is the same with 1, 2 and 4 threads, synchronous and asynchronous, and
// equals that environment stepped by itself (pool_test_envs.h's Reference).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "pool_test_envs.h"
#include "xlaunch/rl/env_pool.h"

namespace {

using namespace xlaunch::test;
using xlaunch::rl::Autoreset;
using xlaunch::rl::EnvBatch;
using xlaunch::rl::EnvPool;
using xlaunch::rl::EnvPoolOptions;
using xlaunch::rl::Space;

const char* const kIds[] = {"CartPole-v1", "Acrobot-v1", "MountainCar-v0", "Pendulum-v1"};

// A deterministic function of the environment and its own last observation: the same trajectory
// whatever order the environments come back in. Pendulum's torques reach past [-2, 2] (clipped).
struct Policy {
  Space space;
  float box = 0;
  Action operator()(int64_t i, const std::vector<float>& obs) {
    Action a;
    const double h = std::fabs(obs[0]) * 37 + std::fabs(obs[1]) * 11 + static_cast<double>(i);
    if (space.kind == Space::Kind::Discrete) {
      a.discrete = static_cast<int64_t>(std::floor(h)) % space.n;
    } else {
      box = static_cast<float>(2.5 * std::sin(h));
      a.box = &box;
    }
    return a;
  }
};

at::Tensor actions_tensor(const Space& space, const std::vector<Action>& acts) {
  if (space.kind == Space::Kind::Discrete) {
    std::vector<int64_t> d;
    for (const Action& a : acts) d.push_back(a.discrete);
    return torch::tensor(d, torch::kLong);
  }
  std::vector<float> f;
  for (const Action& a : acts) f.push_back(*a.box);
  return torch::tensor(f, torch::kFloat).view({static_cast<int64_t>(acts.size()), 1});
}

// Per environment, the rows it returned, in its own order.
using ClassicTrajectories = std::vector<std::vector<Row>>;

ClassicTrajectories run(const std::string& id, int threads, int64_t n, int64_t batch, int64_t rows_per_env) {
  EnvPoolOptions o;
  o.env_id = id;
  o.num_envs = n;
  o.batch_size = batch;
  o.num_threads = threads;
  o.seed = 2027;
  o.autoreset = Autoreset::SameStep;
  EnvPool pool(o);
  Policy policy{pool.spec().action_space};
  ClassicTrajectories tr(n);
  auto take = [&](const EnvBatch& b) {
    std::vector<Action> acts;
    std::vector<float> boxes;
    for (int64_t r = 0; r < b.env_id.size(0); ++r) {
      const int64_t i = b.env_id[r].item<int64_t>();
      tr[i].push_back(row_of(b, r));
      acts.push_back(policy(i, tr[i].back().obs));
      boxes.push_back(policy.box);
    }
    for (size_t k = 0; k < acts.size(); ++k) acts[k].box = &boxes[k];
    return actions_tensor(policy.space, acts);
  };
  if (batch == n) {
    at::Tensor a = take(pool.reset());
    for (int64_t t = 1; t < rows_per_env; ++t) a = take(pool.step(a));
  } else {
    pool.async_reset();
    for (int64_t r = 0; r < rows_per_env * n / batch; ++r) {
      const EnvBatch b = pool.recv();
      pool.send(take(b), b.env_id);
    }
  }
  return tr;
}

}  // namespace

TEST(EnvPoolClassic, TrajectoriesEqualEachEnvironmentSteppedAloneWhateverTheThreadsSyncAndAsync) {
  const int64_t n = 6, rows = 700;  // past every time limit (500 at most)
  for (const char* id : kIds) {
    const xlaunch::rl::EnvFactory make = [id] { return xlaunch::rl::make_env(id); };
    Policy policy{make()->spec().action_space};
    for (int64_t batch : {n, int64_t{2}})
      for (int threads : {1, 2, 4}) {
        SCOPED_TRACE(std::string(id) + " batch=" + std::to_string(batch) + " threads=" + std::to_string(threads));
        const ClassicTrajectories tr = run(id, threads, n, batch, rows);
        int ended = 0;
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_GE(tr[i].size(), size_t{50}) << "env " << i;
          Reference ref(make, 2027, i, Autoreset::SameStep);
          ASSERT_EQ(tr[i][0], ref.reset()) << "env " << i;
          for (size_t s = 1; s < tr[i].size(); ++s)
            ASSERT_EQ(tr[i][s], ref.step(policy(i, ref.last_obs()))) << "env " << i << " row " << s;
          ended += static_cast<int>(ref.episodes.size());
        }
        EXPECT_GT(ended, 0) << "the test must see episodes end";
      }
  }
}
