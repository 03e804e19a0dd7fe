// The MPI communicator on 2 ranks: every collective's result is known in advance from the ranks.
#include <gtest/gtest.h>

#include <ATen/ops/arange.h>
#include <ATen/ops/full.h>

#include "xlaunch/error.h"
#include "comm/mpi_communicator.h"
#include "bool_reduce_check.h"

using xlaunch::MpiCommunicator;
using xlaunch::ReduceOp;

class MpiComm : public ::testing::Test {
 protected:
  std::shared_ptr<MpiCommunicator> comm = MpiCommunicator::world();
  int r = comm->rank(), n = comm->size();
};

TEST_F(MpiComm, AllreduceSumAvgMaxAcrossDtypes) {
  ASSERT_EQ(n, 2) << "run under mpirun -np 2";
  for (auto dtype : {at::kFloat, at::kDouble, at::kInt, at::kLong, at::kBFloat16, at::kHalf}) {
    at::Tensor t = at::arange(0, 100, at::TensorOptions().dtype(dtype)) + (r + 1);
    comm->allreduce(t, ReduceOp::Sum);
    at::Tensor expected = (at::arange(0, 100, at::kDouble) * 2 + 3);
    EXPECT_TRUE(t.to(at::kDouble).equal(expected)) << at::toString(dtype);
  }
  at::Tensor a = at::full({5}, static_cast<double>(r + 1), at::kDouble);
  comm->allreduce(a, ReduceOp::Avg);
  EXPECT_TRUE(a.eq(1.5).all().item<bool>());
  at::Tensor m = at::full({3}, static_cast<float>(10 * r), at::kFloat);
  comm->allreduce(m, ReduceOp::Max);
  EXPECT_TRUE(m.eq(10.0f).all().item<bool>());
}

TEST_F(MpiComm, BooleansReduceAsLogicalOrAndAvgIsRefused) {
  ASSERT_EQ(n, 2) << "run under mpirun -np 2";
  xlaunch::test::expect_bools_reduce_as_pytorch(*comm);
}

TEST_F(MpiComm, BroadcastAllgatherBarrier) {
  at::Tensor t = at::full({7}, static_cast<float>(r == 1 ? 42 : -1), at::kFloat);
  comm->broadcast(t, 1);
  EXPECT_TRUE(t.eq(42.0f).all().item<bool>());
  at::Tensor g = comm->allgather(at::full({2, 3}, static_cast<int64_t>(r), at::kLong));
  ASSERT_EQ(g.sizes(), (std::vector<int64_t>{2, 2, 3}));
  EXPECT_TRUE(g[0].eq(0).all().item<bool>());
  EXPECT_TRUE(g[1].eq(1).all().item<bool>());
  comm->barrier();
  auto strings = comm->allgather_strings(std::string(r == 0 ? "rank zero" : "one"));
  EXPECT_EQ(strings, (std::vector<std::string>{"rank zero", "one"}));
}

TEST_F(MpiComm, AsyncCollectivesCompleteInIssueOrder) {
  std::vector<at::Tensor> ts;
  std::vector<std::shared_ptr<xlaunch::Work>> works;
  for (int k = 0; k < 20; ++k) {
    ts.push_back(at::full({1000}, static_cast<float>(k + r), at::kFloat));
    works.push_back(comm->allreduce_async(ts.back(), ReduceOp::Sum));
  }
  for (int k = 19; k >= 0; --k) works[k]->wait();
  for (int k = 0; k < 20; ++k) EXPECT_TRUE(ts[k].eq(static_cast<float>(2 * k + 1)).all().item<bool>()) << k;
}

TEST_F(MpiComm, BadInputIsAUsageError) {
  at::Tensor t = at::arange(0, 12, at::kFloat).view({3, 4}).t();  // not contiguous
  EXPECT_THROW(comm->allreduce_async(t, ReduceOp::Sum), xlaunch::UsageError);
  at::Tensor c = at::zeros({3}, at::kComplexFloat);
  EXPECT_THROW(comm->allreduce(c, ReduceOp::Sum), xlaunch::UsageError);
  at::Tensor f = at::zeros({3});
  EXPECT_THROW(comm->broadcast(f, 5), xlaunch::UsageError);
}

TEST_F(MpiComm, CompressedAllreduceSendsSixteenBitsAndCastsBack) {
  for (auto wire : {at::kBFloat16, at::kHalf}) {
    at::Tensor t = at::arange(0, 64, at::kFloat) * 0.25 + r;  // exact in both 16-bit types
    comm->allreduce_compressed_async({t}, ReduceOp::Avg, wire)->wait();
    EXPECT_EQ(t.scalar_type(), at::kFloat);
    EXPECT_TRUE(t.equal(at::arange(0, 64, at::kFloat) * 0.25 + 0.5)) << at::toString(wire);
  }
}
