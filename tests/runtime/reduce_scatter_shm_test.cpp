// Reduce-scatter and allgather of the shared-memory communicator, on 2, 3 and 4 ranks of this
// machine (registered once per size). Reduce-scatter is compared with the same communicator's
// allreduce (the same reduction kernel: the same bits) and with one process reducing every rank's
// data; allgather with MPI's. Rank q's data comes from a generator seeded with (case, q), so every
// rank knows every rank's; the values are small integers, exact in every dtype's sums. Chunks of
// 0, 1, odd and large lengths; float and double through shared memory, float16 and bfloat16
// through MPI (shared memory holds float and double only); Sum, Avg, Max.
#include <gtest/gtest.h>

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include <atomic>
#include <string>

#include "comm/mpi_communicator.h"
#include "comm/shm_communicator.h"
#include "shm_test_tensors.h"
#include "xlaunch/error.h"

using xlaunch::ReduceOp;
using xlaunch::ShmCommunicator;

namespace {

const at::ScalarType kDtypes[] = {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16};
const ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max};
const int64_t kChunks[] = {0, 1, 7, 1001, 65537};

bool in_shared_memory(at::ScalarType dtype) { return dtype == at::kFloat || dtype == at::kDouble; }

std::string name(at::ScalarType dtype, ReduceOp op, int64_t chunk) {
  return std::string(at::toString(dtype)) + (op == ReduceOp::Sum ? " sum" : op == ReduceOp::Avg ? " avg" : " max") +
         " chunk " + std::to_string(chunk);
}

using xlaunch::test::expect_near;
using xlaunch::test::random_values;
using xlaunch::test::reduced_values;

}  // namespace

class ShmScatterGather : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_GE(world->size(), 2) << "run under mpirun -np 2, 3 or 4";
    comm->comm_thread().set_start_observer([this](const char* kind, uint64_t) {
      if (std::string(kind) != "allreduce") ++shared_collectives;
    });
  }
  void TearDown() override { comm->comm_thread().set_start_observer(nullptr); }
  std::shared_ptr<xlaunch::MpiCommunicator> world = xlaunch::MpiCommunicator::world();
  std::shared_ptr<ShmCommunicator> comm = std::make_shared<ShmCommunicator>(world);
  int r = comm->rank(), w = comm->size();
  std::atomic<int> shared_collectives{0};  // reduce-scatters and allgathers that ran in shared memory
};

TEST_F(ShmScatterGather, ReduceScatterEqualsAllreducesChunk) {
  int salt = 0;
  for (auto dtype : kDtypes)
    for (int64_t chunk : kChunks) {
      at::Tensor in = comm->allocate(chunk * w, at::TensorOptions().dtype(dtype));
      at::Tensor full = comm->allocate(chunk * w, at::TensorOptions().dtype(dtype));
      ASSERT_EQ(comm->holds(in), in_shared_memory(dtype)) << at::toString(dtype);
      for (auto op : kOps) {
        const std::string what = name(dtype, op, chunk);
        ++salt;
        in.copy_(random_values(chunk * w, salt, r, dtype));
        full.copy_(in);
        comm->allreduce(full, op);
        at::Tensor out = at::empty({chunk}, dtype);
        const int before = shared_collectives.load();
        comm->reduce_scatter(in, out, op);
        EXPECT_EQ(shared_collectives.load() - before, in_shared_memory(dtype) && chunk > 0 ? 1 : 0) << what;
        if (in_shared_memory(dtype)) EXPECT_TRUE(out.equal(full.narrow(0, r * chunk, chunk))) << what;
        else expect_near(out, full.narrow(0, r * chunk, chunk).to(at::kDouble), what);
        expect_near(out, reduced_values(chunk * w, salt, w, op).narrow(0, r * chunk, chunk), what);
        EXPECT_TRUE(in.equal(random_values(chunk * w, salt, r, dtype))) << what << ": the input is left as it was";
      }
    }
}

// As sharded data parallelism reduces a bucket: into the rank's own chunk of it.
TEST_F(ShmScatterGather, ReduceScatterInPlaceIntoTheRanksChunk) {
  const int64_t chunk = 3001;
  at::Tensor bucket = comm->allocate(chunk * w, at::TensorOptions().dtype(at::kFloat));
  for (auto op : kOps) {
    bucket.copy_(random_values(chunk * w, 7, r, at::kFloat));
    comm->reduce_scatter(bucket, bucket.narrow(0, r * chunk, chunk), op);
    expect_near(bucket.narrow(0, r * chunk, chunk), reduced_values(chunk * w, 7, w, op).narrow(0, r * chunk, chunk),
                name(at::kFloat, op, chunk));
    for (int q = 0; q < w; ++q)
      if (q != r)
        EXPECT_TRUE(bucket.narrow(0, q * chunk, chunk).equal(random_values(chunk * w, 7, r, at::kFloat).narrow(0, q * chunk, chunk)))
            << "chunk " << q << " of rank " << r << " was written";
  }
}

// Every way a tensor can lie: the part in shared memory (each rank reads the others'), the output
// in shared memory (each rank writes into the others'), the part as the output's own chunk (in
// place), neither (MPI). Against MPI's allgather of the same parts.
TEST_F(ShmScatterGather, AllgatherEqualsMpiWhereverTheTensorsLie) {
  int salt = 100;
  for (auto dtype : kDtypes)
    for (int64_t chunk : kChunks) {
      const auto opts = at::TensorOptions().dtype(dtype);
      at::Tensor in_shared = comm->allocate(chunk, opts), out_shared = comm->allocate(chunk * w, opts);
      for (int how = 0; how < 4; ++how) {
        const std::string what = name(dtype, ReduceOp::Sum, chunk) + " way " + std::to_string(how);
        ++salt;
        const at::Tensor part = random_values(chunk, salt, r, dtype);
        at::Tensor in = how == 0 ? in_shared : how == 2 ? out_shared.narrow(0, r * chunk, chunk) : at::empty({chunk}, opts);
        at::Tensor out = how == 1 || how == 2 ? out_shared : at::empty({chunk * w}, opts);
        out.fill_(-99);
        in.copy_(part);
        at::Tensor want = at::empty({chunk * w}, opts);
        world->allgather_async(part, want)->wait();
        const int before = shared_collectives.load();
        comm->allgather_async(in, out)->wait();
        const bool held = how < 3 && in_shared_memory(dtype) && chunk > 0;
        EXPECT_EQ(shared_collectives.load() - before, held ? 1 : 0) << what;
        EXPECT_TRUE(out.equal(want)) << what;
        for (int q = 0; q < w; ++q) EXPECT_TRUE(out.narrow(0, q * chunk, chunk).equal(random_values(chunk, salt, q, dtype))) << what;
      }
    }
}

// Several collectives in flight at once, waited for in reverse: each is one item in program order.
TEST_F(ShmScatterGather, CollectivesInFlightTogether) {
  const int64_t chunk = 513;
  std::vector<at::Tensor> ins, outs;
  std::vector<std::shared_ptr<xlaunch::Work>> works;
  for (int k = 0; k < 6; ++k) {
    ins.push_back(comm->allocate(chunk * w, at::TensorOptions().dtype(k % 2 ? at::kDouble : at::kFloat)));
    ins.back().copy_(random_values(chunk * w, 200 + k, r, ins.back().scalar_type()));
    outs.push_back(at::empty({chunk}, ins.back().options()));
    works.push_back(comm->reduce_scatter_async(ins.back(), outs.back(), kOps[k % 3]));
  }
  at::Tensor gathered = at::empty({chunk * w * w});
  works.push_back(comm->allgather_async(ins.front(), gathered));
  for (auto it = works.rbegin(); it != works.rend(); ++it) (*it)->wait();
  for (int k = 0; k < 6; ++k)
    expect_near(outs[k], reduced_values(chunk * w, 200 + k, w, kOps[k % 3]).narrow(0, r * chunk, chunk), "item " + std::to_string(k));
  for (int q = 0; q < w; ++q)
    EXPECT_TRUE(gathered.narrow(0, q * chunk * w, chunk * w).equal(random_values(chunk * w, 200, q, at::kFloat))) << q;
  EXPECT_EQ(shared_collectives.load(), 7);
}

TEST_F(ShmScatterGather, MistakesAreNamed) {
  at::Tensor in = comm->allocate(10 * w, at::TensorOptions().dtype(at::kFloat));
  at::Tensor out = at::empty({11});
  try {
    comm->reduce_scatter(in, out, ReduceOp::Sum);
    ADD_FAILURE() << "a wrong output size was accepted";
  } catch (const xlaunch::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("in must hold size() * out.numel() elements"), std::string::npos) << e.what();
  }
  EXPECT_THROW(comm->allgather_async(in.narrow(0, 0, 10), at::empty({11})), xlaunch::UsageError);
  at::Tensor bools = at::zeros({2 * w}, at::kBool);
  EXPECT_THROW(comm->reduce_scatter(bools, at::empty({2}, at::kBool), ReduceOp::Avg), xlaunch::UsageError);
}
