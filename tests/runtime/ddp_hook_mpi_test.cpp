// The communication hooks (ddp.comm_hook) on 2 ranks, over MPI and over shared memory, against one
// process doing the same work.
#include <gtest/gtest.h>

#include <torch/optim/sgd.h>

#include <string>
#include <tuple>

#include "ddp_mpi_helpers.h"

using xlaunch::Accelerator;
using xlaunch::AcceleratorOptions;
using namespace xlaunch::test;

class CommHooks : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

// Each hook over MPI and over shared memory: every rank ends with the same parameters, and the
// 16-bit hooks stay within their precision of one process doing the same work.
TEST_P(CommHooks, EveryRankTrainsTheSameModel) {
  const auto& [hook, transport] = GetParam();
  auto options = cpu_options();
  options.cpu_allreduce = transport;
  options.ddp.comm_hook = hook;
  options.ddp.powersgd_start_step = 2;
  options.ddp.powersgd_rank = 2;
  Accelerator acc(options);
  torch::manual_seed(8);
  Mlp mlp, reference;
  copy_state(*reference, *mlp);
  auto model = acc.prepare(mlp);
  torch::optim::SGD sgd(mlp->parameters(), 0.05);
  torch::optim::SGD ref_sgd(reference->parameters(), 0.05);
  auto& opt = acc.prepare(sgd);
  for (int step = 0; step < 6; ++step) {
    backward_both(acc, model, reference, step);
    opt.step();
    opt.zero_grad();
    ref_sgd.step();
    ref_sgd.zero_grad();
  }
  for (const auto& p : mlp->parameters()) {
    at::Tensor both = acc.gather(p.detach().unsqueeze(0));
    EXPECT_TRUE(both[0].equal(both[1])) << hook << " over " << transport;
  }
  if (hook != "powersgd") expect_same_params(*mlp, *reference, hook == "bf16" ? 2e-2 : 2e-3);
  EXPECT_EQ(acc.reducer(0).sync_steps(), 6);
}

INSTANTIATE_TEST_SUITE_P(Ddp, CommHooks,
                         ::testing::Combine(::testing::Values("fp16", "bf16", "powersgd"), ::testing::Values("mpi", "auto")));
