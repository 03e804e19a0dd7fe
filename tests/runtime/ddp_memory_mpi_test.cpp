// Where the gradients of 2 data-parallel ranks live and when their buckets travel: the first
// bucket's allreduce overlaps backward (MPI and shared memory), gradients outlive the Accelerator,
// and fresh gradients are born in the shared pool and reduced there.
#include <gtest/gtest.h>

#include <torch/optim/sgd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <thread>

#include "comm/mpi_communicator.h"
#include "comm/shared_memory.h"
#include "comm/shm_communicator.h"
#include "ddp_mpi_helpers.h"

using xlaunch::Accelerator;
using xlaunch::AcceleratorOptions;
using namespace xlaunch::test;

class Overlap : public ::testing::TestWithParam<std::string> {};

// For the MPI and the shared-memory gradient allreduce alike.
TEST_P(Overlap, FirstBucketAllreduceStartsBeforeBackwardEnds) {
  auto options = cpu_options();
  options.cpu_allreduce = GetParam();
  options.ddp.first_bucket_bytes = 1;  // fc3's bias alone: ready at the very start of backward
  options.ddp.bucket_cap_mb = 0.001;
  Accelerator acc(options);
  Mlp mlp;
  auto model = acc.prepare(mlp);
  auto comm = acc.bucket_communicator(acc.device());
  EXPECT_EQ(comm->name(), GetParam() == "mpi" ? "mpi" : "shm");
  auto* threaded = dynamic_cast<xlaunch::ThreadedCommunicator*>(comm.get());
  auto* shm = dynamic_cast<xlaunch::ShmCommunicator*>(comm.get());
  ASSERT_TRUE(threaded || shm);
  xlaunch::CommThread& thread = threaded ? threaded->comm_thread() : shm->comm_thread();
  std::atomic<int> allreduces_started{0};
  thread.set_start_observer([&](const char* kind, uint64_t) {
    if (std::string(kind) == "allreduce") ++allreduces_started;
  });
  // fc1's weight gets its gradient last. Hold backward there until the communication thread has
  // started the first bucket's allreduce: only overlap lets that happen.
  bool overlapped = false;
  auto hook = mlp->fc1->weight.register_hook([&](const at::Tensor& g) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (allreduces_started.load() == 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    overlapped = allreduces_started.load() > 0;
    return g;
  });
  const auto mine = mlp_batch(acc.process_index(), 0);
  acc.backward(loss_of(model(mine.x), mine.y));
  thread.set_start_observer(nullptr);
  mlp->fc1->weight.remove_hook(hook);
  EXPECT_GE(acc.reducer(0).buckets().size(), 3u);
  EXPECT_TRUE(overlapped) << "no allreduce had started while backward was still computing fc1";
}

INSTANTIATE_TEST_SUITE_P(Ddp, Overlap, ::testing::Values("mpi", "auto"));

TEST(Ddp, GradientsOutliveTheAccelerator) {
  Mlp mlp;
  at::Tensor expected;
  {
    Accelerator acc(cpu_options());  // shared-memory buckets under mpirun on one machine
    auto model = acc.prepare(mlp);
    const auto mine = mlp_batch(acc.process_index(), 0);
    acc.backward(loss_of(model(mine.x), mine.y));
    expected = mlp->fc1->weight.grad().clone();
  }
  // The bucket memory the gradients alias stays valid after the Accelerator is gone.
  EXPECT_TRUE(mlp->fc1->weight.grad().equal(expected));
  mlp->fc1->weight.mutable_grad().reset();
}

// zero_grad resets gradients to none; the next backward's fresh gradients are born in the shared
// pool and reduced there (no copy into the bucket), with the same result as one process.
TEST(Ddp, FreshGradientsAreReducedWhereAutogradPutThem) {
  Accelerator acc(cpu_options());
  torch::manual_seed(5);
  Mlp mlp, reference;
  copy_state(*reference, *mlp);
  auto model = acc.prepare(mlp);
  auto comm = acc.bucket_communicator(acc.device());
  ASSERT_EQ(comm->name(), "shm");
  torch::optim::SGD sgd(mlp->parameters(), torch::optim::SGDOptions(0.1));
  auto& opt = acc.prepare(sgd);
  std::map<std::string, const void*> bucket_slot;
  for (const auto& p : mlp->named_parameters()) bucket_slot[p.key()] = p.value().grad().data_ptr();
  opt.zero_grad();  // set_to_none
  backward_both(acc, model, reference, 0);
  expect_same_grads(*mlp, *reference);
  for (const auto& p : mlp->named_parameters()) {
    EXPECT_NE(p.value().grad().data_ptr(), bucket_slot[p.key()]) << p.key() << " was copied into its bucket";
    EXPECT_TRUE(xlaunch::shared_memory(*comm)->holds(p.value().grad())) << p.key();
  }
  // Accumulating into pool gradients (no set_to_none) stays in place and stays correct.
  const void* before = mlp->fc1->weight.grad().data_ptr();
  backward_both(acc, model, reference, 1);
  EXPECT_EQ(mlp->fc1->weight.grad().data_ptr(), before);
  expect_same_grads(*mlp, *reference);
}

TEST(Ddp, PoolGradientsOutliveTheAccelerator) {
  Mlp mlp;
  at::Tensor expected;
  {
    Accelerator acc(cpu_options());
    auto model = acc.prepare(mlp);
    for (auto& p : mlp->parameters()) p.mutable_grad().reset();
    const auto mine = mlp_batch(acc.process_index(), 0);
    acc.backward(loss_of(model(mine.x), mine.y));
    ASSERT_TRUE(xlaunch::shared_memory(*acc.bucket_communicator(acc.device()))->holds(mlp->fc1->weight.grad()));
    expected = mlp->fc1->weight.grad().clone();
  }
  EXPECT_TRUE(mlp->fc1->weight.grad().equal(expected));
  for (auto& p : mlp->parameters()) p.mutable_grad().reset();  // frees the last pool blocks
}

