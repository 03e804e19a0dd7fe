// The communication hooks (ddp.comm_hook) on 2 ranks, over MPI and over shared memory, against one
// process doing the same work; and the reducer's control bit riding on each of them.
#include <gtest/gtest.h>

#include <torch/optim/sgd.h>

#include <ATen/ops/cat.h>

#include <string>
#include <tuple>
#include <vector>

#include "comm/shared_memory.h"

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

namespace {
// Rank `raiser`'s control bit on for micro-steps [on, off) of 4 micro-steps of 2-step gradient
// accumulation (synced: 1, 3); what this rank saw after each micro-step: its gradients and
// control_raised_at(). (Not further: at the step boundary after a raised bit is observed, the
// Accelerator stops the job for a preemption, which is what the bit is for.)
struct Seen {
  std::vector<at::Tensor> grads;
  std::vector<int64_t> raised;
  bool zero_copy = true;  // every synced backward's fc1 gradient lay in shared memory
};
Seen accumulate_with_bit(const std::string& hook, const std::string& transport, int raiser, int on, int off) {
  auto options = cpu_options();
  options.cpu_allreduce = transport;
  options.ddp.comm_hook = hook;
  options.ddp.powersgd_start_step = 1;
  options.ddp.powersgd_rank = 2;
  options.gradient_accumulation_steps = 2;
  Accelerator acc(options);
  torch::manual_seed(9);
  Mlp mlp;
  auto model = acc.prepare(mlp);
  torch::optim::SGD sgd(mlp->parameters(), 0.05);
  auto& opt = acc.prepare(sgd);
  auto comm = acc.bucket_communicator(acc.device());
  Seen seen;
  for (int micro = 0; micro < 4; ++micro) {
    if (acc.process_index() == raiser) acc.reducer(0).set_control_bit(micro >= on && micro < off);
    acc.accumulate();
    const auto mine = mlp_batch(acc.process_index(), micro);
    acc.backward(loss_of(model(mine.x), mine.y));
    std::vector<at::Tensor> flat;
    for (const auto& p : mlp->parameters()) flat.push_back(p.grad().detach().reshape(-1).clone());
    seen.grads.push_back(at::cat(flat));
    seen.raised.push_back(acc.reducer(0).control_raised_at());
    auto* shm = xlaunch::shared_memory(*comm);
    if (acc.sync_gradients()) seen.zero_copy = seen.zero_copy && shm && shm->holds(mlp->fc1->weight.grad());
    opt.step();
    opt.zero_grad();  // set_to_none: the next gradients are born in the shared pool, where there is one
  }
  return seen;
}
}  // namespace

class ControlBit : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

// Each hook over MPI and over shared memory (under none, the zero-copy path: the control element
// travels in bucket.in_place): a bit raised by rank 1 during micro-step 2 (no sync) is carried by
// micro-step 3, the second synced backward, and both ranks observe it there; a bit cleared before
// any synced backward is never observed; the gradients are bit for bit those of a run without bits.
TEST_P(ControlBit, RaisedOnOneRankIsObservedOnBothAtTheSameStep) {
  const auto& [hook, transport] = GetParam();
  const Seen quiet = accumulate_with_bit(hook, transport, -1, 0, 0);
  const Seen raised = accumulate_with_bit(hook, transport, 1, 2, 4);
  const Seen cleared = accumulate_with_bit(hook, transport, 0, 2, 3);
  EXPECT_EQ(quiet.raised, std::vector<int64_t>(4, -1));
  EXPECT_EQ(raised.raised, (std::vector<int64_t>{-1, -1, -1, 2})) << hook << " over " << transport;
  EXPECT_EQ(cleared.raised, std::vector<int64_t>(4, -1)) << hook << " over " << transport;
  for (size_t k = 0; k < 4; ++k) {
    EXPECT_TRUE(raised.grads[k].equal(quiet.grads[k])) << hook << " over " << transport << " micro-step " << k;
    EXPECT_TRUE(cleared.grads[k].equal(quiet.grads[k])) << hook << " over " << transport << " micro-step " << k;
  }
  if (hook == "none" && transport == "auto") EXPECT_TRUE(raised.zero_copy) << "the zero-copy path was not taken";
}

INSTANTIATE_TEST_SUITE_P(Ddp, ControlBit,
                         ::testing::Combine(::testing::Values("none", "fp16", "bf16", "powersgd"),
                                            ::testing::Values("mpi", "auto")));
