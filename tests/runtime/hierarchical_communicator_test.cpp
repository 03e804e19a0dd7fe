// The hierarchical allreduce on 4 ranks of this machine, told that they lie on 2 "machines" of 2
// ranks (the layout is the communicator's input; which machine a rank is on is decided elsewhere,
// from boot id and /dev/shm, and tested below as a pure function). Layouts: machines of consecutive
// ranks (0,1 | 2,3), interleaved ones (0,2 | 1,3), and 4 machines of 1 (auto never picks it, but
// the leaders' ring then takes 3 steps per phase instead of 1). Values are integers built from
// (rank, index), so every expected result is exact; sizes on both sides of the leaders'
// reduce-scatter threshold and lists larger than the staging buffer. And the reducer's control bit
// riding on its in-place bucket allreduce. Reduce-scatter and allgather (sharded data parallelism)
// on random data against allreduce and MPI's allgather, in every layout, in windows of staging.
#include <gtest/gtest.h>

#include <ATen/ops/sin.h>
#include <ATen/ops/zeros.h>

#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>

#include <algorithm>
#include <atomic>

#include "comm/hierarchical_communicator.h"
#include "comm/mpi_communicator.h"
#include "ddp/grad_capture.h"
#include "comm/shared_pool.h"
#include "shm_test_tensors.h"
#include "bool_reduce_check.h"
#include "models.h"
#include "xlaunch/reducer.h"

using xlaunch::HierarchicalCommunicator;
using xlaunch::MachineLayout;
using xlaunch::ReduceOp;
using xlaunch::SharedPool;

namespace {

using xlaunch::test::pool_tensor;
using xlaunch::test::values;  // over 4 ranks: sum 4 v0 + 6, mean v0 + 1.5, max v0 + 3 (v0: rank 0's)

// Every rank holds the same bits.
void expect_same_everywhere(HierarchicalCommunicator& comm, const at::Tensor& t) {
  const at::Tensor all = comm.allgather(t.contiguous());
  for (int q = 1; q < comm.size(); ++q) EXPECT_TRUE(all[q].equal(all[0])) << "rank " << q << " differs from rank 0";
}

}  // namespace

TEST(MachineLayoutTest, RanksOnTheSameSharedMemoryShareAMachine) {
  const MachineLayout two = xlaunch::machine_layout({"a", "a", "b", "b"});
  EXPECT_EQ(two.leader, (std::vector<int>{0, 0, 2, 2}));
  EXPECT_EQ(two.machines, 2);
  EXPECT_EQ(two.ranks_per_machine, 2);
  EXPECT_EQ(xlaunch::auto_cpu_allreduce(two), "hier");
  const MachineLayout mixed = xlaunch::machine_layout({"a", "b", "a", "b", "a", "b"});
  EXPECT_EQ(mixed.leader, (std::vector<int>{0, 1, 0, 1, 0, 1}));
  EXPECT_EQ(mixed.ranks_per_machine, 3);
  EXPECT_EQ(xlaunch::auto_cpu_allreduce(mixed), "hier");
  EXPECT_EQ(xlaunch::auto_cpu_allreduce(xlaunch::machine_layout({"a", "a", "a"})), "shm");
  EXPECT_EQ(xlaunch::auto_cpu_allreduce(xlaunch::machine_layout({"a", "b"})), "mpi") << "one rank per machine";
  const MachineLayout uneven = xlaunch::machine_layout({"a", "a", "a", "b"});
  EXPECT_EQ(uneven.ranks_per_machine, 0);
  EXPECT_EQ(xlaunch::auto_cpu_allreduce(uneven), "mpi") << "machines of different sizes";
  EXPECT_EQ(xlaunch::auto_cpu_allreduce(xlaunch::machine_layout({"a"})), "mpi") << "a world of one";
}

TEST(MachineLayoutTest, StagingPutsEachMachinesRanksTogether) {
  const auto consecutive = xlaunch::staging_order(xlaunch::machine_layout({"a", "a", "b", "b"}));
  EXPECT_EQ(consecutive.rank, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(consecutive.machine_first, (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(consecutive.block, (std::vector<int>{0, 1, 2, 3}));
  const auto interleaved = xlaunch::staging_order(xlaunch::machine_layout({"a", "b", "c", "a", "b", "c"}));
  EXPECT_EQ(interleaved.rank, (std::vector<int>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(interleaved.machine_first, (std::vector<int>{0, 2, 4, 6}));
  EXPECT_EQ(interleaved.block, (std::vector<int>{0, 2, 4, 1, 3, 5}));
  const auto uneven = xlaunch::staging_order(xlaunch::machine_layout({"b", "a", "a", "b", "a"}));
  EXPECT_EQ(uneven.rank, (std::vector<int>{0, 3, 1, 2, 4}));
  EXPECT_EQ(uneven.machine_first, (std::vector<int>{0, 2, 5}));
  EXPECT_EQ(uneven.block, (std::vector<int>{0, 2, 3, 1, 4}));
}

class Hier : public ::testing::TestWithParam<std::vector<std::string>> {
 protected:
  void SetUp() override {
    world = xlaunch::MpiCommunicator::world();
    ASSERT_EQ(world->size(), 4) << "run under mpirun -np 4";
    comm = std::make_unique<HierarchicalCommunicator>(world, xlaunch::machine_layout(GetParam()));
    r = comm->rank();
  }
  std::shared_ptr<xlaunch::MpiCommunicator> world;
  std::unique_ptr<HierarchicalCommunicator> comm;
  int r = 0;
};

TEST_P(Hier, SubCommunicatorsFollowTheLayout) {
  const MachineLayout layout = xlaunch::machine_layout(GetParam());
  EXPECT_EQ(comm->rank(), world->rank());
  EXPECT_EQ(comm->size(), 4);
  std::vector<int> mates;  // the ranks of this rank's machine, and the leaders
  std::vector<int> leaders;
  for (int q = 0; q < 4; ++q) {
    if (layout.leader[q] == layout.leader[r]) mates.push_back(q);
    if (layout.leader[q] == q) leaders.push_back(q);
  }
  ASSERT_TRUE(comm->local());
  EXPECT_EQ(comm->local()->size(), static_cast<int>(mates.size()));
  EXPECT_EQ(comm->local()->rank(), std::find(mates.begin(), mates.end(), r) - mates.begin());
  EXPECT_EQ(comm->leaders() != nullptr, layout.leader[r] == r) << "the leaders are the machines' local ranks 0";
  if (comm->leaders()) {
    EXPECT_EQ(comm->leaders()->size(), static_cast<int>(leaders.size()));
    EXPECT_EQ(comm->leaders()->rank(), std::find(leaders.begin(), leaders.end(), r) - leaders.begin());
  }
  // The sub-communicators run on the world's thread.
  EXPECT_EQ(&comm->local()->comm_thread(), &world->comm_thread());
  at::Tensor mine = at::full({1}, static_cast<int64_t>(r), at::kLong);
  comm->local()->allreduce(mine, ReduceOp::Sum);
  int64_t want = 0;
  for (int q : mates) want += q;
  EXPECT_EQ(mine.item<int64_t>(), want) << "the sum over this machine's ranks";
}

TEST_P(Hier, BucketAllreduceSumAvgMax) {
  // 1001 elements: MPI_Allreduce between the leaders; 400000 (1.6 MB / 3.2 MB): reduce-scatter.
  for (int64_t n : {1001, 400000})
    for (auto dtype : {at::kFloat, at::kDouble}) {
      at::Tensor t = comm->allocate(n, at::TensorOptions().dtype(dtype));
      ASSERT_TRUE(comm->holds(t));
      t.copy_(values(n, 0, r, dtype));
      comm->allreduce(t, ReduceOp::Sum);
      EXPECT_TRUE(t.equal(values(n, 0, 0, dtype) * 4 + 6)) << at::toString(dtype) << " n " << n;
      t.copy_(values(n, 0, r, dtype));
      comm->allreduce(t, ReduceOp::Avg);
      EXPECT_TRUE(t.equal(values(n, 0, 0, dtype) + 1.5)) << at::toString(dtype) << " n " << n;
      expect_same_everywhere(*comm, t);
      t.copy_(values(n, 0, r, dtype));
      comm->allreduce(t, ReduceOp::Max);
      EXPECT_TRUE(t.equal(values(n, 0, 3, dtype))) << at::toString(dtype) << " n " << n;
    }
}

// Each rank's tensors lie in different places (pool or bucket, rank-dependent), some are empty,
// there are more than one round of the place table, and together they are larger than the staging
// buffer (1 MiB: only a small bucket was allocated), so they go in pieces. One collective: one
// item on the world's thread.
TEST_P(Hier, CoalescedAllreduceInPiecesWhereTheTensorsLie) {
  SharedPool* pool = comm->reserve_pool(16 << 20);
  ASSERT_NE(pool, nullptr);
  at::Tensor bucket = comm->allocate(4000, at::TensorOptions().dtype(at::kFloat));
  std::vector<at::Tensor> ts;
  const int count = 1500;
  int64_t bucket_used = 0, total = 0;
  for (int k = 0; k < count; ++k) {
    const int64_t n = k % 7 == 0 ? 0 : 1 + (k * 37) % 900;
    const bool in_bucket = (k + r) % 3 == 0 && bucket_used + n <= bucket.numel();
    at::Tensor t = in_bucket ? bucket.narrow(0, bucket_used, n) : pool_tensor(pool, n, at::kFloat);
    if (in_bucket) bucket_used += n;
    total += n;
    t.copy_(values(n, k, r, at::kFloat));
    ASSERT_TRUE(comm->holds(t)) << k;
    ts.push_back(t);
  }
  ASSERT_GT(total * 4, 1 << 20) << "larger than the staging buffer";
  std::atomic<int> allreduces{0};
  world->comm_thread().set_start_observer([&](const char* kind, uint64_t) {
    if (std::string(kind) == "allreduce") ++allreduces;
  });
  comm->allreduce_coalesced_async(ts, ReduceOp::Avg)->wait();
  world->comm_thread().set_start_observer(nullptr);
  EXPECT_EQ(allreduces.load(), 1);
  for (int k = 0; k < count; ++k)
    ASSERT_TRUE(ts[k].equal(values(ts[k].numel(), k, 0, at::kFloat) + 1.5f)) << "tensor " << k;
}

TEST_P(Hier, BooleansReduceAsLogicalOrAndAvgIsRefused) { xlaunch::test::expect_bools_reduce_as_pytorch(*comm); }

TEST_P(Hier, TensorsOutsideSharedMemoryGoThroughMpi) {
  at::Tensor plain = values(500, 3, r, at::kDouble);
  EXPECT_FALSE(comm->holds(plain));
  comm->allreduce(plain, ReduceOp::Sum);
  EXPECT_TRUE(plain.equal(values(500, 3, 0, at::kDouble) * 4 + 6));
  at::Tensor ints = at::full({4}, static_cast<int64_t>(r + 1), at::kLong);
  EXPECT_FALSE(comm->holds(ints));
  comm->allreduce(ints, ReduceOp::Sum);
  EXPECT_TRUE(ints.eq(10).all().item<bool>());
  at::Tensor b = at::full({3}, static_cast<double>(r == 2 ? 7 : 0), at::kDouble);
  comm->broadcast(b, 2);
  EXPECT_TRUE(b.eq(7).all().item<bool>());
}

// The fp16/bf16 hooks: summed in full precision inside each machine, only the leaders' exchange
// in 16 bits (one collective), the same bits everywhere, within 16-bit rounding of the mean.
// Each wire type gets a new bucket where the last one was freed (the same addresses, likely): the
// communicator must not take it for the old one, which the other ranks still map.
TEST_P(Hier, CompressedAllreduceInsideMachinesInFullPrecision) {
  for (auto wire : {at::kBFloat16, at::kHalf}) {
    at::Tensor t = comm->allocate(3000, at::TensorOptions().dtype(at::kFloat));
    ASSERT_TRUE(comm->holds(t));
    t.copy_(at::sin(at::arange(3000, at::kFloat) * 0.01 + r));
    comm->allreduce_compressed_async({t}, ReduceOp::Avg, wire)->wait();
    at::Tensor want = at::zeros({3000});
    for (int q = 0; q < 4; ++q) want += at::sin(at::arange(3000, at::kFloat) * 0.01 + q) / 4;
    const double err = (t - want).abs().max().item<double>();
    EXPECT_LT(err, wire == at::kHalf ? 2e-3 : 1.6e-2) << at::toString(wire);
    EXPECT_GT(err, 0) << "the leaders' exchange should have rounded to 16 bits";
    expect_same_everywhere(*comm, t);
  }
}

// The reducer over it, with gradients reduced where autograd put them (the shared pool): rank 3's
// control bit, raised before the second synced backward, is observed there by every rank, and the
// gradients are bit for bit those of the same run without it.
TEST_P(Hier, ReducerCarriesTheControlBitToEveryRank) {
  const std::shared_ptr<xlaunch::Communicator> shared(comm.get(), [](xlaunch::Communicator*) {});
  auto run = [&](bool raise) {
    torch::manual_seed(4);
    xlaunch::test::Mlp mlp;
    std::vector<at::Tensor> params = mlp->parameters();
    std::vector<std::string> names(params.size(), "p");
    xlaunch::ReducerOptions o;
    o.comm_hook = "none";
    o.bucket_cap_mb = 0.002;
    xlaunch::Reducer reducer(params, names, [&](const at::Device&) { return shared; }, o);
    std::vector<at::Tensor> grads;
    std::vector<int64_t> raised;
    for (int step = 0; step < 3; ++step) {
      if (raise && r == 3 && step == 1) reducer.set_control_bit(true);
      for (auto& p : params) p.mutable_grad().reset();  // fresh gradients, born in the pool
      reducer.prepare_for_backward(true);
      const auto b = xlaunch::test::mlp_batch(r, step);
      xlaunch::test::loss_of(mlp(b.x), b.y).backward();
      reducer.finalize_backward();
      EXPECT_TRUE(comm->holds(params.front().grad())) << "the zero-copy path was not taken";
      for (const auto& p : params) grads.push_back(p.grad().clone());
      raised.push_back(reducer.control_raised_at());
    }
    for (auto& p : params) p.mutable_grad().reset();  // pool blocks back before the reducer goes
    return std::make_pair(grads, raised);
  };
  const auto quiet = run(false);
  const auto raised = run(true);
  EXPECT_EQ(quiet.second, (std::vector<int64_t>{-1, -1, -1}));
  EXPECT_EQ(raised.second, (std::vector<int64_t>{-1, 2, 2}));
  for (size_t k = 0; k < quiet.first.size(); ++k) EXPECT_TRUE(raised.first[k].equal(quiet.first[k])) << k;
}

// Reduce-scatter against the same communicator's allreduce (integer sums are exact, and both
// divide the sum for Avg: the same bits) and one process's reduction, on random data of every
// rank's own seed; one item on the world's thread. Chunks of 0, 1, odd length, and one whose
// staged window crosses the leaders' ring threshold; float16/bfloat16 (and plain memory) through MPI.
TEST_P(Hier, ReduceScatterEqualsAllreducesChunk) {
  std::atomic<int> items{0};
  world->comm_thread().set_start_observer([&](const char* kind, uint64_t) {
    if (std::string(kind) == "reduce_scatter") ++items;
  });
  int salt = 0;
  for (auto dtype : {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf})
    for (int64_t chunk : {0, 1, 7, 1001, 100003}) {
      at::Tensor in = comm->allocate(chunk * 4, at::TensorOptions().dtype(dtype));
      const bool held = dtype == at::kFloat || dtype == at::kDouble;
      ASSERT_EQ(comm->holds(in), held);
      for (auto op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
        const std::string what = std::string(at::toString(dtype)) + " chunk " + std::to_string(chunk) + " op " +
                                 std::to_string(static_cast<int>(op));
        ++salt;
        in.copy_(xlaunch::test::random_values(chunk * 4, salt, r, dtype));
        at::Tensor full = in.clone();
        comm->allreduce(full, op);
        at::Tensor out = at::empty({chunk}, dtype);
        items = 0;
        comm->reduce_scatter(in, out, op);
        // One item on the world's thread: the hierarchical one for tensors in shared memory, the
        // MPI communicator's own reduce-scatter for the others (and for empty chunks).
        EXPECT_EQ(items.load(), 1) << what;
        if (held) EXPECT_TRUE(out.equal(full.narrow(0, r * chunk, chunk))) << what;
        xlaunch::test::expect_near(out, xlaunch::test::reduced_values(chunk * 4, salt, 4, op).narrow(0, r * chunk, chunk),
                                   what);
        EXPECT_TRUE(in.equal(xlaunch::test::random_values(chunk * 4, salt, r, dtype))) << what << ": input changed";
      }
    }
  world->comm_thread().set_start_observer(nullptr);
}

// Allgather with the part in shared memory, the output there, the part as the output's own chunk,
// and neither (MPI): the same as MPI's allgather.
TEST_P(Hier, AllgatherEqualsMpiWhereverTheTensorsLie) {
  int salt = 100;
  for (auto dtype : {at::kFloat, at::kDouble, at::kHalf})
    for (int64_t chunk : {0, 1, 7, 1001, 100003}) {
      const auto opts = at::TensorOptions().dtype(dtype);
      at::Tensor in_shared = comm->allocate(chunk, opts), out_shared = comm->allocate(chunk * 4, opts);
      for (int how = 0; how < 4; ++how) {
        const std::string what = std::string(at::toString(dtype)) + " chunk " + std::to_string(chunk) + " way " +
                                 std::to_string(how);
        ++salt;
        const at::Tensor part = xlaunch::test::random_values(chunk, salt, r, dtype);
        at::Tensor in = how == 0 ? in_shared : how == 2 ? out_shared.narrow(0, r * chunk, chunk) : at::empty({chunk}, opts);
        at::Tensor out = how == 1 || how == 2 ? out_shared : at::empty({chunk * 4}, opts);
        out.fill_(-99);
        in.copy_(part);
        at::Tensor want = at::empty({chunk * 4}, opts);
        world->allgather_async(part, want)->wait();
        comm->allgather_async(in, out)->wait();
        EXPECT_TRUE(out.equal(want)) << what;
        for (int q = 0; q < 4; ++q)
          EXPECT_TRUE(out.narrow(0, q * chunk, chunk).equal(xlaunch::test::random_values(chunk, salt, q, dtype))) << what;
      }
    }
}

// A list larger than the staging buffer (1 MiB: no bucket was allocated to grow it) goes in
// windows: the first crosses the leaders' ring threshold, the last does not.
TEST_P(Hier, ReduceScatterAndAllgatherInStagingWindows) {
  SharedPool* pool = comm->reserve_pool(8 << 20);
  ASSERT_NE(pool, nullptr);
  const int64_t chunk = 100000;  // 4 ranks x 400 KB of float: 1.6 MB staged
  at::Tensor in = pool_tensor(pool, chunk * 4, at::kFloat);
  for (auto op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
    in.copy_(xlaunch::test::random_values(chunk * 4, 300, r, at::kFloat));
    at::Tensor out = at::empty({chunk});
    comm->reduce_scatter(in, out, op);
    xlaunch::test::expect_near(out, xlaunch::test::reduced_values(chunk * 4, 300, 4, op).narrow(0, r * chunk, chunk),
                               "op " + std::to_string(static_cast<int>(op)));
  }
  // In place, as sharded data parallelism reduces a bucket into its rank's chunk of it.
  in.copy_(xlaunch::test::random_values(chunk * 4, 301, r, at::kFloat));
  comm->reduce_scatter(in, in.narrow(0, r * chunk, chunk), ReduceOp::Sum);
  xlaunch::test::expect_near(in.narrow(0, r * chunk, chunk),
                             xlaunch::test::reduced_values(chunk * 4, 301, 4, ReduceOp::Sum).narrow(0, r * chunk, chunk),
                             "in place");
  in.copy_(xlaunch::test::random_values(chunk * 4, 300, r, at::kFloat));
  at::Tensor gathered = at::empty({chunk * 16});
  comm->allgather_async(in, gathered)->wait();
  for (int q = 0; q < 4; ++q)
    EXPECT_TRUE(gathered.narrow(0, q * chunk * 4, chunk * 4).equal(xlaunch::test::random_values(chunk * 4, 300, q, at::kFloat)))
        << q;
}

INSTANTIATE_TEST_SUITE_P(Layouts, Hier,
                         ::testing::Values(std::vector<std::string>{"a", "a", "b", "b"},
                                           std::vector<std::string>{"a", "b", "a", "b"},
                                           std::vector<std::string>{"a", "b", "c", "d"}),
                         [](const auto& info) {
                           return std::string(info.index == 0 ? "Consecutive" : info.index == 1 ? "Interleaved" : "FourMachines");
                         });
