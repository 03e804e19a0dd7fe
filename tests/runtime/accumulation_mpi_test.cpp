// backward(loss_sum, num_items) under mpirun on 2 or 3 ranks (the transports of a real job: MPI,
// and shared memory for the gradient buckets): masked micro-batches of 3, 8, 1 and 12 items spread
// over the ranks equal one process on one batch of 24, and num_items 0 on every rank fails on every
// rank instead of hanging. Every rank computes the one-process reference itself.
#include <gtest/gtest.h>

#include <ATen/ops/scalar_tensor.h>

#include "ddp_mpi_helpers.h"
#include "masked_batches.h"
#include "xlaunch/error.h"
#include "xlaunch/process_state.h"

using xlaunch::Accelerator;
using namespace xlaunch::test;

namespace {

xlaunch::AcceleratorOptions window_options(const char* hook = "none") {
  xlaunch::AcceleratorOptions o = cpu_options();
  const int world = xlaunch::ProcessState::get().world_size();
  o.gradient_accumulation_steps = static_cast<int>(spread(world, 0).size());
  o.ddp.comm_hook = hook;
  return o;
}

}  // namespace

TEST(AccumulationMpi, MaskedMicroBatchesOverTheRanksEqualOneProcessOnOneBatch) {
  Accelerator acc(window_options());
  ASSERT_TRUE(acc.num_processes() == 2 || acc.num_processes() == 3) << "run on 2 or 3 ranks";
  torch::manual_seed(5);
  Mlp mlp, reference;
  copy_state(*reference, *mlp);
  auto model = acc.prepare(mlp);
  for (int w = 0; w < 2; ++w) {  // the second window divides by the first one's items
    clear_grads(*mlp);
    clear_grads(*reference);
    train_window(acc, model, window_batches(w));
    reference_backward(reference, window_batches(w));
    expect_same_grads(*mlp, *reference, 1e-6);
  }
}

TEST(AccumulationMpi, NumItemsZeroOnEveryRankFailsOnEveryRank) {
  Accelerator acc(window_options());
  Mlp mlp;
  auto model = acc.prepare(mlp);
  std::string error;
  try {
    for (int k = 0; k < acc.options().gradient_accumulation_steps; ++k) {
      acc.accumulate();
      const Masked b = masked_batch(80 + k, 5, 0);
      acc.backward(loss_sum_of(model(b.x), b), b.mask.sum());
    }
  } catch (const xlaunch::UsageError& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("num_items 0 on every rank"), std::string::npos) << error;
  // The ranks are still in step: a collective after the error completes.
  at::Tensor one = at::scalar_tensor(1.0, at::kDouble).reshape({1});
  EXPECT_EQ(acc.reduce(one).item<double>(), acc.num_processes());
}
