// The MPI communicator's reduce-scatter (both algorithms, and the size threshold between them) and
// allgather, under mpirun on 2, 3 and 4 ranks: every result against the answer each rank computes
// alone and against allreduce of the same data (reduce_scatter_check.h).
#include <gtest/gtest.h>

#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>

#include "comm/mpi_communicator.h"
#include "comm/mpi_reduce_scatter.h"
#include "reduce_scatter_check.h"

using xlaunch::MpiCommunicator;
using xlaunch::ReduceOp;
using xlaunch::ReduceScatterAlgorithm;

namespace {

constexpr ReduceScatterAlgorithm kForced[] = {ReduceScatterAlgorithm::Block, ReduceScatterAlgorithm::Ring,
                                              ReduceScatterAlgorithm::Auto};
const char* name(ReduceScatterAlgorithm a) {
  return a == ReduceScatterAlgorithm::Block ? "block" : a == ReduceScatterAlgorithm::Ring ? "ring" : "auto";
}

class MpiReduceScatter : public ::testing::Test {
 protected:
  void TearDown() override { comm->force_reduce_scatter(ReduceScatterAlgorithm::Auto); }
  std::shared_ptr<MpiCommunicator> comm = MpiCommunicator::world();
};

}  // namespace

TEST(ReduceScatterAlgorithmChoice, BySizeUnlessForcedAndRingAboveAnIntCount) {
  using A = ReduceScatterAlgorithm;
  // 64 KiB per chunk is the threshold, whatever the element size.
  EXPECT_EQ(xlaunch::reduce_scatter_algorithm(16383, 4, A::Auto), A::Block);
  EXPECT_EQ(xlaunch::reduce_scatter_algorithm(16384, 4, A::Auto), A::Ring);
  EXPECT_EQ(xlaunch::reduce_scatter_algorithm(8192, 8, A::Auto), A::Ring);
  EXPECT_EQ(xlaunch::reduce_scatter_algorithm(32767, 2, A::Auto), A::Block);
  EXPECT_EQ(xlaunch::reduce_scatter_algorithm(0, 4, A::Auto), A::Block);
  // Forced either way.
  EXPECT_EQ(xlaunch::reduce_scatter_algorithm(1 << 20, 4, A::Block), A::Block);
  EXPECT_EQ(xlaunch::reduce_scatter_algorithm(1, 4, A::Ring), A::Ring);
  // MPI_Reduce_scatter_block takes one int count: above kMpiMaxCount elements only the ring goes.
  EXPECT_EQ(xlaunch::kMpiMaxCount, 134217727);
  EXPECT_EQ(xlaunch::reduce_scatter_algorithm(134217727, 1, A::Block), A::Block);
  EXPECT_EQ(xlaunch::reduce_scatter_algorithm(134217728, 1, A::Block), A::Ring);
}

TEST_F(MpiReduceScatter, AgreesWithAllreduceForEveryDtypeOpAndChunkLength) {
  ASSERT_GE(comm->size(), 2) << "run under mpirun -np 2, 3 or 4";
  uint64_t seed = 1;
  for (auto forced : kForced) {
    SCOPED_TRACE(name(forced));
    comm->force_reduce_scatter(forced);
    for (auto dtype : {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf})
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max})
        for (int64_t count : {0, 1, 2, 7, 1001, 20011})  // 20011 float32: above the threshold under Auto
          xlaunch::test::check_reduce_scatter(*comm, seed++, count, dtype, op);
  }
}

TEST_F(MpiReduceScatter, NonIntegerDataIsCloseToAllreduce) {
  uint64_t seed = 100;
  for (auto forced : kForced) {
    SCOPED_TRACE(name(forced));
    comm->force_reduce_scatter(forced);
    for (auto dtype : {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf})
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max})
        xlaunch::test::check_reduce_scatter_close(*comm, seed++, 777, dtype, op);
  }
}

TEST_F(MpiReduceScatter, OutMayBeThisRanksChunkOfIn) {
  uint64_t seed = 200;
  for (auto forced : kForced) {
    SCOPED_TRACE(name(forced));
    comm->force_reduce_scatter(forced);
    for (auto dtype : {at::kFloat, at::kBFloat16})
      for (int64_t count : {1, 333, 20011})
        xlaunch::test::check_reduce_scatter(*comm, seed++, count, dtype, ReduceOp::Avg, /*in_place=*/true);
  }
}

TEST_F(MpiReduceScatter, BooleansAreLogicalOr) {
  for (auto forced : kForced) {
    SCOPED_TRACE(name(forced));
    comm->force_reduce_scatter(forced);
    xlaunch::test::check_bool_reduce_scatter(*comm);
  }
}

TEST_F(MpiReduceScatter, WrongArgumentsAreUsageErrors) {
  xlaunch::test::check_reduce_scatter_usage_errors(*comm);
  const int w = comm->size();
  // A dtype MPI cannot move: refused on the communication thread, on every rank, before any MPI call.
  EXPECT_THROW(comm->reduce_scatter(at::zeros({w * 2}, at::kComplexFloat), at::zeros({2}, at::kComplexFloat),
                                    ReduceOp::Sum),
               xlaunch::UsageError);
  xlaunch::test::check_reduce_scatter(*comm, 300, 5, at::kDouble, ReduceOp::Max);
}

TEST_F(MpiReduceScatter, AsyncCollectivesCompleteInIssueOrder) {
  // Reduce-scatters (small ones by the block algorithm, large ones by the ring) between allreduces,
  // waited for in reverse: the communication thread runs them in issue order on every rank.
  const int w = comm->size(), r = comm->rank();
  std::vector<at::Tensor> outs, maxes;
  std::vector<std::shared_ptr<xlaunch::Work>> works;
  for (int k = 0; k < 10; ++k) {
    const int64_t count = k % 2 ? 20000 : 100;
    outs.push_back(at::zeros({count}));
    works.push_back(comm->reduce_scatter_async(at::full({w * count}, static_cast<float>(k + r)), outs.back(),
                                               ReduceOp::Sum));
    maxes.push_back(at::full({10}, static_cast<float>(k + r)));
    works.push_back(comm->allreduce_async(maxes.back(), ReduceOp::Max));
  }
  for (auto it = works.rbegin(); it != works.rend(); ++it) (*it)->wait();
  for (int k = 0; k < 10; ++k) {
    EXPECT_TRUE(outs[k].eq(static_cast<float>(k * w + w * (w - 1) / 2)).all().item<bool>()) << k;
    EXPECT_TRUE(maxes[k].eq(static_cast<float>(k + w - 1)).all().item<bool>()) << k;
  }
}

TEST_F(MpiReduceScatter, SubCommunicatorsAndAWorldOfOne) {
  // Halves of the world (sizes differ on 3 ranks), then every rank alone: a world of one copies.
  const int r = comm->rank();
  auto half = comm->split(r % 2, r);
  ASSERT_TRUE(half);
  xlaunch::test::check_reduce_scatter(*half, 400, 9, at::kFloat, ReduceOp::Sum);
  auto alone = comm->split(r, 0);
  ASSERT_TRUE(alone);
  xlaunch::test::check_reduce_scatter(*alone, 401, 9, at::kHalf, ReduceOp::Avg);
  xlaunch::test::check_allgather(*alone, 402, 9, at::kFloat, /*in_place=*/true);
}

TEST_F(MpiReduceScatter, AllgatherAboveAnIntCountGoesPieceByPiece) {
  // 128 MiB + 20 bytes per rank: MPI's int counts take it in pieces (a ZeRO shard of a large parameter).
  const int64_t count = (int64_t{128} << 20) / 4 + 5;
  for (bool in_place : {false, true}) xlaunch::test::check_allgather(*comm, 900 + in_place, count, at::kFloat, in_place);
}

TEST_F(MpiReduceScatter, AllgatherOfOddSizesAndInPlace) {
  uint64_t seed = 500;
  for (auto dtype : {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf, at::kLong, at::kBool})
    for (int64_t count : {0, 1, 7, 1001})
      for (bool in_place : {false, true}) xlaunch::test::check_allgather(*comm, seed++, count, dtype, in_place);
  // `in` overlapping `out`, but one element off this rank's chunk, is refused.
  const int w = comm->size(), r = comm->rank();
  at::Tensor out = at::zeros({w * 4});
  EXPECT_THROW(comm->allgather_async(out.narrow(0, r * 4 + (r + 1 < w ? 1 : -1), 4), out), xlaunch::UsageError);
}
