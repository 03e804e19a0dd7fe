// TensorEnv on a GPU (the built-ins' CUDA kernel, env_rows.cu): resets equal the CPU's bit for bit
// (integer and double arithmetic), steps follow the CPU's within float32 rounding (CUDA's cosf and
// sinf are not glibc's), the episode ring and the bad-action counter work on the device, and the
// time per step is printed for sizes up to 2^20. Skipped without a GPU (scripts/gpu/run.sh runs it;
// built into env_pool_test, which the GPU bundle carries).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>

#include "usage_error.h"
#include "xlaunch/rl/tensor_env.h"

namespace {

using xlaunch::rl::EnvBatch;
using xlaunch::rl::TensorEnv;
using xlaunch::rl::TensorEnvOptions;

#define SKIP_WITHOUT_GPU() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device"

TensorEnvOptions options(const std::string& id, int64_t n, c10::Device device) {
  TensorEnvOptions o;
  o.env_id = id;
  o.num_envs = n;
  o.seed = 12;
  o.device = device;
  return o;
}

TEST(TensorEnvCuda, ResetsAreTheCpusBitForBit) {
  SKIP_WITHOUT_GPU();
  for (const std::string id : {"CartPole-v1", "MountainCar-v0", "MountainCarContinuous-v0"}) {  // obs = state
    TensorEnv cpu(options(id, 5000, torch::kCPU)), gpu(options(id, 5000, torch::kCUDA));
    const EnvBatch a = cpu.reset(), b = gpu.reset();
    ASSERT_TRUE(b.obs.is_cuda()) << id;
    EXPECT_TRUE(torch::equal(a.obs, b.obs.cpu())) << id;
  }
}

// CartPole, 20 steps of random actions from the same states: observations within 1e-5 (relative),
// terminated equal except where the CPU's state is within 1e-4 of a threshold.
TEST(TensorEnvCuda, StepsFollowTheCpusWithinRounding) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 4096;
  TensorEnv cpu(options("CartPole-v1", n, torch::kCPU)), gpu(options("CartPole-v1", n, torch::kCUDA));
  cpu.reset();
  gpu.reset();
  torch::manual_seed(3);
  int64_t near = 0;
  for (int t = 0; t < 20; ++t) {
    const at::Tensor act = torch::randint(0, 2, {n}, torch::kLong);
    const EnvBatch a = cpu.step(act), b = gpu.step(act.cuda());
    const at::Tensor g = b.obs.cpu();
    EXPECT_TRUE(torch::allclose(g, a.obs, 1e-5, 1e-5)) << "step " << t << ": " << (g - a.obs).abs().max();
    const at::Tensor differ = b.terminated.cpu() != a.terminated;
    const at::Tensor edge = ((a.obs.select(1, 0).abs() - 2.4).abs() < 1e-4) |
                            ((a.obs.select(1, 2).abs() - 12 * 2 * M_PI / 360).abs() < 1e-4);
    near += differ.sum().item<int64_t>();
    EXPECT_EQ((differ & edge.logical_not()).sum().item<int64_t>(), 0) << "step " << t;
    if (differ.any().item<bool>()) return;  // the rows have parted: nothing more to compare
  }
  std::printf("CartPole on the GPU followed the CPU for 20 steps (%lld terminations at a threshold's edge differed)\n",
              static_cast<long long>(near));
}

// MountainCar under random actions ends its episodes at the time limit: the episodes the device ring
// returns equal the CPU's host list; a bad action is counted on the device and named by the check.
TEST(TensorEnvCuda, EpisodesAndBadActionsAreKeptOnTheDevice) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 1000;
  TensorEnv cpu(options("MountainCar-v0", n, torch::kCPU)), gpu(options("MountainCar-v0", n, torch::kCUDA));
  cpu.reset();
  gpu.reset();
  torch::manual_seed(4);
  for (int t = 0; t < 450; ++t) {
    const at::Tensor act = torch::randint(0, 3, {n}, torch::kLong);
    cpu.step(act);
    gpu.step(act.cuda());
  }
  const auto f = cpu.finished(), g = gpu.finished();
  ASSERT_EQ(f.episodes.size(), g.episodes.size());
  for (size_t i = 0; i < f.episodes.size(); ++i) {
    EXPECT_EQ(f.episodes[i].env_id, g.episodes[i].env_id) << i;
    EXPECT_EQ(f.episodes[i].length, g.episodes[i].length) << i;
    EXPECT_EQ(f.episodes[i].ret, g.episodes[i].ret) << i;
  }
  EXPECT_GE(g.episodes.size(), static_cast<size_t>(2 * n));
  at::Tensor bad = torch::ones({n}, torch::kLong);
  bad[7] = 3;
  gpu.step(bad.cuda());
  const std::string m = xlaunch::test::usage_error_of([&] { gpu.check_actions(); });
  EXPECT_NE(m.find("1 action(s) since the last check were outside Discrete(3)"), std::string::npos) << m;
}

// Not a check: the time per step of all N environments (printed, for docs/benchmarks.md).
TEST(TensorEnvCuda, TimePerStep) {
  SKIP_WITHOUT_GPU();
  for (const std::string id : {"CartPole-v1", "Acrobot-v1"}) {
    for (int64_t n : {1 << 10, 1 << 14, 1 << 18, 1 << 20}) {
      TensorEnv env(options(id, n, torch::kCUDA));
      env.reset();
      const at::Tensor act = torch::randint(0, 2, {n}, torch::TensorOptions().dtype(torch::kLong).device(torch::kCUDA));
      for (int t = 0; t < 20; ++t) env.step(act);
      torch::cuda::synchronize();
      const int steps = 500;
      const auto t0 = std::chrono::steady_clock::now();
      for (int t = 0; t < steps; ++t) env.step(act);
      torch::cuda::synchronize();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("bench=tensor_env env=%s num_envs=%lld device=cuda backend=tensor steps_per_s=%.0f us_per_step=%.1f\n",
                  id.c_str(), static_cast<long long>(n), static_cast<double>(n) * steps / s, s / steps * 1e6);
    }
  }
}

}  // namespace
