// The in-process communicator's reduce-scatter (each rank reduces its own chunk of every rank's
// input) and allgather, ranks as threads on 1 to 4 ranks: every result against the answer each
// rank computes alone and against allreduce of the same data (reduce_scatter_check.h).
#include <gtest/gtest.h>

#include <ATen/ops/zeros.h>

#include "inprocess_ranks.h"
#include "reduce_scatter_check.h"

using xlaunch::InProcessCommunicator;
using xlaunch::ReduceOp;
using xlaunch::test::run_ranks;

TEST(InProcessReduceScatter, AgreesWithAllreduceForEveryDtypeOpAndChunkLength) {
  for (int n = 1; n <= 4; ++n)
    run_ranks(n, [](std::shared_ptr<InProcessCommunicator> c) {
      uint64_t seed = 1;
      for (auto dtype : {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf})
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max})
          for (int64_t count : {0, 1, 2, 7, 1001}) {
            xlaunch::test::check_reduce_scatter(*c, seed++, count, dtype, op);
            xlaunch::test::check_reduce_scatter(*c, seed++, count, dtype, op, /*in_place=*/true);
          }
      for (auto dtype : {at::kFloat, at::kDouble})
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max})
          xlaunch::test::check_reduce_scatter_close(*c, seed++, 333, dtype, op);
    });
}

TEST(InProcessReduceScatter, BooleansAreLogicalOrAndWrongArgumentsAreUsageErrors) {
  for (int n = 1; n <= 3; ++n)
    run_ranks(n, [](std::shared_ptr<InProcessCommunicator> c) {
      xlaunch::test::check_bool_reduce_scatter(*c);
      xlaunch::test::check_reduce_scatter_usage_errors(*c);
    });
}

TEST(InProcessReduceScatter, AnInjectedFailureIsACommErrorFromWaitAndTheNextOneWorks) {
  run_ranks(3, [](std::shared_ptr<InProcessCommunicator> c) {
    c->fail_at(0);  // on every rank: none is left waiting for the others
    auto work = c->reduce_scatter_async(at::zeros({6}), at::zeros({2}), ReduceOp::Sum);
    EXPECT_THROW(work->wait(), xlaunch::CommError);
    xlaunch::test::check_reduce_scatter(*c, 7, 5, at::kFloat, ReduceOp::Sum);
  });
}

TEST(InProcessAllgather, OddSizesAndInPlace) {
  for (int n = 1; n <= 4; ++n)
    run_ranks(n, [](std::shared_ptr<InProcessCommunicator> c) {
      uint64_t seed = 500;
      for (auto dtype : {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf, at::kLong, at::kBool})
        for (int64_t count : {0, 1, 7, 1001})
          for (bool in_place : {false, true}) xlaunch::test::check_allgather(*c, seed++, count, dtype, in_place);
    });
}
