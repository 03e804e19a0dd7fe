// The pool on a GPU: batches arrive on the device (one asynchronous copy of pinned memory, the
// training stream waiting for it) and equal the CPU pool's. Skipped without a GPU.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "pool_test_envs.h"
#include "xlaunch/rl/env_pool.h"

namespace {

using namespace xlaunch::test;
using xlaunch::rl::Autoreset;
using xlaunch::rl::EnvBatch;
using xlaunch::rl::EnvPool;
using xlaunch::rl::EnvPoolOptions;

EnvPoolOptions options(int64_t batch, c10::Device device) {
  EnvPoolOptions o;
  o.factory = [] { return std::make_unique<WalkEnv>(); };
  o.num_envs = 16;
  o.batch_size = batch;
  o.num_threads = 2;
  o.seed = 3;
  o.autoreset = Autoreset::SameStep;
  o.device = device;
  return o;
}

void expect_equal(const EnvBatch& gpu, const EnvBatch& cpu) {
  ASSERT_TRUE(gpu.obs.is_cuda());
  ASSERT_TRUE(gpu.final_obs.is_cuda());
  ASSERT_TRUE(gpu.env_id.is_cuda());
  // Computed on the training thread's stream right away: it must see the copied values.
  EXPECT_TRUE(torch::equal((gpu.obs * 2).cpu(), cpu.obs * 2));
  EXPECT_TRUE(torch::equal(gpu.final_obs.cpu(), cpu.final_obs));
  EXPECT_TRUE(torch::equal(gpu.reward.cpu(), cpu.reward));
  EXPECT_TRUE(torch::equal(gpu.terminated.cpu(), cpu.terminated));
  EXPECT_TRUE(torch::equal(gpu.truncated.cpu(), cpu.truncated));
  EXPECT_TRUE(torch::equal(gpu.env_id.cpu(), cpu.env_id));
}

TEST(EnvPoolCuda, SynchronousBatchesEqualTheCpuPools) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU on this machine";
  EnvPool gpu(options(0, c10::Device(c10::kCUDA, 0))), cpu(options(0, c10::kCPU));
  expect_equal(gpu.reset(), cpu.reset());
  std::vector<EnvBatch> kept;  // a rollout keeps its batches: each is storage of its own
  for (int t = 0; t < 50; ++t) {
    const at::Tensor a = torch::randint(0, 3, {16}, torch::kLong);
    EnvBatch g = gpu.step(a.cuda()), c = cpu.step(a);
    expect_equal(g, c);
    kept.push_back(g);
    kept.push_back(c);
  }
  for (size_t i = 0; i + 1 < kept.size(); i += 2) expect_equal(kept[i], kept[i + 1]);
}

TEST(EnvPoolCuda, AsynchronousBatchesEqualTheCpuPools) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU on this machine";
  // One thread and batch 4 of 16: both pools return the environments in the order they were sent.
  EnvPoolOptions og = options(4, c10::Device(c10::kCUDA, 0)), oc = options(4, c10::kCPU);
  og.num_threads = oc.num_threads = 1;
  EnvPool gpu(og), cpu(oc);
  gpu.async_reset();
  cpu.async_reset();
  for (int t = 0; t < 100; ++t) {
    const EnvBatch g = gpu.recv(), c = cpu.recv();
    expect_equal(g, c);
    const at::Tensor a = torch::randint(0, 3, {4}, torch::kLong);
    gpu.send(a.cuda(), g.env_id);
    cpu.send(a, c.env_id);
  }
}

}  // namespace
