// The shared-memory communicator on 2 ranks: bucket buffers, the gradient pool, and coalesced
// allreduces over tensors wherever they lie in shared memory. Values are integers built from
// (rank, index), so every expected result is exact.
#include <gtest/gtest.h>

#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/from_blob.h>

#include "xlaunch/error.h"
#include "ddp/grad_capture.h"
#include "comm/mpi_communicator.h"
#include "comm/shm_communicator.h"
#include "comm/shm_segment.h"
#include "shm_test_tensors.h"
#include "bool_reduce_check.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

using xlaunch::ReduceOp;
using xlaunch::SharedPool;
using xlaunch::ShmCommunicator;

namespace {

using xlaunch::test::pool_tensor;
using xlaunch::test::values;

}  // namespace

class Shm : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(comm->size(), 2) << "run under mpirun -np 2"; }
  std::shared_ptr<ShmCommunicator> comm =
      std::make_shared<ShmCommunicator>(xlaunch::MpiCommunicator::world());
  int r = comm->rank();
};

TEST_F(Shm, BucketAllreduceSumAvgMax) {
  for (auto dtype : {at::kFloat, at::kDouble}) {
    at::Tensor t = comm->allocate(1001, at::TensorOptions().dtype(dtype));
    ASSERT_TRUE(comm->holds(t));
    t.copy_(values(1001, 0, r, dtype));
    comm->allreduce(t, ReduceOp::Sum);
    EXPECT_TRUE(t.equal(values(1001, 0, 0, dtype) * 2 + 1)) << at::toString(dtype);
    t.copy_(values(1001, 0, r, dtype));
    comm->allreduce(t, ReduceOp::Avg);
    EXPECT_TRUE(t.equal(values(1001, 0, 0, dtype) + 0.5)) << at::toString(dtype);
    t.copy_(values(1001, 0, r, dtype));
    comm->allreduce(t, ReduceOp::Max);
    EXPECT_TRUE(t.equal(values(1001, 0, 1, dtype))) << at::toString(dtype);
  }
}

// Each rank's tensors lie in different places (pool or bucket, rank-dependent), some are empty,
// and there are more of them than one round of the place table holds.
TEST_F(Shm, CoalescedAllreduceReducesTensorsWhereTheyLie) {
  SharedPool* pool = comm->reserve_pool(8 << 20);
  ASSERT_NE(pool, nullptr);
  at::Tensor bucket = comm->allocate(4000, at::TensorOptions().dtype(at::kFloat));
  std::vector<at::Tensor> ts;
  const int count = 1500;
  int64_t bucket_used = 0;
  for (int k = 0; k < count; ++k) {
    const int64_t n = k % 7 == 0 ? 0 : 1 + (k * 37) % 300;
    const bool in_bucket = (k + r) % 3 == 0 && bucket_used + n <= bucket.numel();
    at::Tensor t = in_bucket ? bucket.narrow(0, bucket_used, n) : pool_tensor(pool, n, at::kFloat);
    if (in_bucket) bucket_used += n;
    t.copy_(values(n, k, r, at::kFloat));
    ASSERT_TRUE(comm->holds(t)) << k;
    ts.push_back(t);
  }
  comm->allreduce_coalesced_async(ts, ReduceOp::Avg)->wait();
  for (int k = 0; k < count; ++k)
    ASSERT_TRUE(ts[k].equal(values(ts[k].numel(), k, 0, at::kFloat) + 0.5f)) << "tensor " << k;
}

TEST_F(Shm, TensorsOutsideSharedMemoryGoThroughMpi) {
  at::Tensor plain = values(500, 3, r, at::kDouble);
  EXPECT_FALSE(comm->holds(plain));
  std::vector<at::Tensor> ts{plain, values(7, 4, r, at::kDouble)};
  comm->allreduce_coalesced_async(ts, ReduceOp::Sum)->wait();
  EXPECT_TRUE(ts[0].equal(values(500, 3, 0, at::kDouble) * 2 + 1));
  EXPECT_TRUE(ts[1].equal(values(7, 4, 0, at::kDouble) * 2 + 1));
  at::Tensor ints = at::full({4}, static_cast<int64_t>(r + 1), at::kLong);
  EXPECT_FALSE(comm->holds(ints));
  comm->allreduce(ints, ReduceOp::Sum);
  EXPECT_TRUE(ints.eq(3).all().item<bool>());
}

TEST_F(Shm, BooleansReduceAsLogicalOrAndAvgIsRefused) { xlaunch::test::expect_bools_reduce_as_pytorch(*comm); }

TEST_F(Shm, PoolBlocksOutliveTheCommunicator) {
  SharedPool* pool = comm->reserve_pool(1 << 16);
  ASSERT_NE(pool, nullptr);
  at::Tensor t = pool_tensor(pool, 100, at::kFloat);
  t.copy_(values(100, 0, r, at::kFloat));
  comm->allreduce(t, ReduceOp::Sum);
  comm.reset();  // the pool is closed; its memory stays while t uses it
  EXPECT_TRUE(t.equal(values(100, 0, 0, at::kFloat) * 2 + 1));
  t.add_(1);
  EXPECT_TRUE(t.equal(values(100, 0, 0, at::kFloat) * 2 + 2));
}

// Issue 16: a segment that already exists under the name a rank draws (a stale job's, or one
// planted to get in the way) is reported and left alone; the rank draws another name and the job
// goes on. The test makes each rank's first draw for every segment collide with one it planted.
TEST(ShmNames, ASegmentInTheWayIsReportedNotReusedAndTheJobGoesOn) {
  auto world = xlaunch::MpiCommunicator::world();
  const int r = world->rank();
  at::Tensor pid0 = at::full({1}, static_cast<int64_t>(getpid()), at::kLong);
  world->broadcast(pid0, 0);
  const std::string prefix = "/xlaunch-" + std::to_string(pid0.item<int64_t>());
  const uint64_t planted_nonce = 0x5ec0000000000000ull | (static_cast<uint64_t>(getpid()) << 8) | static_cast<uint64_t>(r);
  std::vector<std::string> planted = {xlaunch::shm_segment_name(prefix + "-0", planted_nonce)};
  if (r == 0) planted.push_back(xlaunch::shm_segment_name(prefix + "-ctl", planted_nonce));
  for (const auto& name : planted) {
    const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    ASSERT_GE(fd, 0) << name << ": " << std::strerror(errno);
    ASSERT_EQ(write(fd, "planted", 7), 7);
    close(fd);
  }
  bool next_collides = true;  // every segment's first draw collides, its second does not
  xlaunch::set_shm_nonce_source([&] {
    const bool collide = next_collides;
    next_collides = !next_collides;
    return collide ? planted_nonce : planted_nonce + 0x100000000ull + static_cast<uint64_t>(std::rand());
  });
  testing::internal::CaptureStderr();
  {
    auto comm = std::make_shared<ShmCommunicator>(world);
    at::Tensor t = comm->allocate(1001, at::TensorOptions().dtype(at::kFloat));
    ASSERT_TRUE(comm->holds(t)) << "the bucket is in shared memory after all";
    t.copy_(values(1001, 0, r, at::kFloat));
    comm->allreduce(t, ReduceOp::Sum);
    EXPECT_TRUE(t.equal(values(1001, 0, 0, at::kFloat) * 2 + 1));
  }
  const std::string err = testing::internal::GetCapturedStderr();
  xlaunch::set_shm_nonce_source(nullptr);
  for (const auto& name : planted) {
    EXPECT_NE(err.find("shared-memory segment " + name + " exists already"), std::string::npos) << err;
    EXPECT_NE(err.find("not reusing it"), std::string::npos) << err;
    const int fd = shm_open(name.c_str(), O_RDONLY, 0);
    ASSERT_GE(fd, 0) << name << " is left where it was";
    char text[8] = {};
    EXPECT_EQ(read(fd, text, 7), 7);
    EXPECT_STREQ(text, "planted") << name << " was not written";
    close(fd);
    shm_unlink(name.c_str());
  }
}
