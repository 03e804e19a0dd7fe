// SyncBatchNorm on MPI ranks (mpirun -np 3): equal to BatchNorm on the concatenated batch, alone
// over the MPI communicator and inside a prepared model whose gradient buckets travel beside it.
#include <gtest/gtest.h>

#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/optim/sgd.h>

#include "ddp_mpi_helpers.h"
#include "models.h"
#include "sync_batchnorm_check.h"
#include "xlaunch/accelerator.h"

using namespace xlaunch::test;
using xlaunch::Accelerator;

TEST(SyncBatchNormMpi, Input1dAnd2dWithUnequalBatches) {
  Accelerator acc(cpu_options());
  ASSERT_EQ(acc.num_processes(), 3) << "run under mpirun -np 3";
  const auto comm = acc.communicator(at::kCPU);
  expect_sync_batchnorm_equals_batchnorm<torch::nn::BatchNorm1d>({{4, 7, 2}, {}}, comm);
  expect_sync_batchnorm_equals_batchnorm<torch::nn::BatchNorm1d>({{3, 0, 5}, {6}}, comm);
  expect_sync_batchnorm_equals_batchnorm<torch::nn::BatchNorm2d>({{2, 5, 1}, {3, 4}}, comm);
}

// The model's SyncBatchNorm collectives (MPI) interleave with its gradient buckets' (shared memory
// or MPI, on the communication thread) in the same order on every rank: two steps, no hang, the
// weights one process reaches with SGD on the concatenated batches.
TEST(SyncBatchNormMpi, TrainingThroughAcceleratorEqualsOneProcess) {
  auto o = cpu_options();
  o.sync_batchnorm = true;
  o.ddp.first_bucket_bytes = 64;  // several buckets, some ready before the BatchNorm's backward
  Accelerator acc(o);
  const int r = acc.process_index();
  auto make = [] {
    return torch::nn::Sequential(torch::nn::Linear(4, 16), torch::nn::BatchNorm1d(16), torch::nn::ReLU(),
                                 torch::nn::Linear(16, 16), torch::nn::BatchNorm1d(16), torch::nn::ReLU(),
                                 torch::nn::Linear(16, 3));
  };
  torch::manual_seed(9);
  auto net = make(), reference = make();
  copy_state(*reference, *net);
  auto model = acc.prepare(net);
  torch::optim::SGD opt(net->parameters(), 0.1), ref_opt(reference->parameters(), 0.1);
  auto& prepared = acc.prepare(opt);
  const std::vector<int64_t> rows{6, 3, 9};
  const int64_t first = r == 0 ? 0 : r == 1 ? 6 : 9;
  for (int step = 0; step < 2; ++step) {
    auto g = at::make_generator<at::CPUGeneratorImpl>(50 + step);
    const at::Tensor x = at::randn({18, 4}, g) + 1.0, dy = at::randn({18, 3}, g);
    // The mean over the ranks of each rank's sum: the whole batch's sum / 3.
    acc.backward((model(x.narrow(0, first, rows[r])) * dy.narrow(0, first, rows[r])).sum());
    prepared.step();
    prepared.zero_grad();
    ((reference->forward(x) * dy).sum() / 3).backward();
    ref_opt.step();
    ref_opt.zero_grad();
  }
  auto want = reference->named_parameters();
  for (const auto& item : net->named_parameters())
    EXPECT_LT(rel_err(item.value(), want[item.key()]), 1e-5) << "rank " << r << " " << item.key();
  auto wbuf = reference->named_buffers();
  for (const auto& item : net->named_buffers())
    EXPECT_LT(rel_err(item.value().to(at::kDouble), wbuf[item.key()].to(at::kDouble)), 1e-5) << item.key();
}
