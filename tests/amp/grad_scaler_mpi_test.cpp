// The cross-rank skip scenario under mpirun -np 2, over the real MPI communicator: rank 1 alone
// sees inf then NaN, and both ranks must skip those steps and keep the same scale.
#include <gtest/gtest.h>

#include "skip_scenario.h"
#include "comm/mpi_communicator.h"

namespace {

TEST(GradScalerMpi, EveryRankSkipsTheSameSteps) {
  auto comm = xlaunch::MpiCommunicator::world();
  ASSERT_EQ(comm->size(), 2) << "run under mpirun -np 2";
  const auto got = xlaunch::test::run_skip_scenario(comm);
  const auto expected = xlaunch::test::expected_skip_scenario(comm->rank());
  ASSERT_EQ(got.size(), expected.size());
  for (size_t s = 0; s < expected.size(); ++s) {
    EXPECT_EQ(got[s].skipped, expected[s].skipped) << "rank " << comm->rank() << " step " << s;
    EXPECT_EQ(got[s].scale_after_update, expected[s].scale_after_update) << "rank " << comm->rank() << " step " << s;
    EXPECT_EQ(got[s].w_after, expected[s].w_after) << "rank " << comm->rank() << " step " << s;
  }
  // The scales must also agree across ranks, not only with the local expectation.
  at::Tensor scale = at::full({1}, got.back().scale_after_update, at::kDouble);
  at::Tensor max_scale = scale.clone();
  comm->allreduce(max_scale, xlaunch::ReduceOp::Max);
  EXPECT_EQ(max_scale.item<double>(), scale.item<double>());
}

}  // namespace
