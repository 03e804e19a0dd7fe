// The NCCL communicator and DDP on CUDA tensors, one rank per GPU (run under mpirun with as many
// ranks as GPUs, or alone). Skips, saying so, where there is no GPU or no NCCL in this build.
#include <gtest/gtest.h>

#include <torch/cuda.h>

#include "models.h"
#include "xlaunch/accelerator.h"
#include "comm/mpi_communicator.h"
#include "comm/nccl_communicator.h"
#include "bool_reduce_check.h"

namespace {

using namespace xlaunch::test;

void skip_without_gpu() {
  if (!XLAUNCH_HAVE_NCCL) GTEST_SKIP() << "this build has no NCCL (XLAUNCH_WITH_NCCL)";
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device here (torch::cuda::is_available() is false)";
}

// This rank's GPU (ranks share the GPUs round-robin) and an NCCL communicator over the world on it.
struct NcclRank {
  NcclRank() {
    auto cpu = xlaunch::MpiCommunicator::world();
    r = cpu->rank();
    n = cpu->size();
    device = r % static_cast<int>(torch::cuda::device_count());
    comm = xlaunch::make_nccl_communicator(cpu, device);
  }
  int r = 0, n = 1, device = 0;
  std::shared_ptr<xlaunch::Communicator> comm;
};
}  // namespace

TEST(Nccl, CollectivesOnTheGpu) {
  skip_without_gpu();
  if (IsSkipped()) return;
  const NcclRank nr;
  const int r = nr.r, n = nr.n, device = nr.device;
  const auto& comm = nr.comm;
  const auto opts = at::TensorOptions().device(at::kCUDA, device);
  at::Tensor t = at::full({1 << 20}, static_cast<float>(r + 1), opts);
  comm->allreduce(t, xlaunch::ReduceOp::Sum);
  EXPECT_TRUE(t.eq(n * (n + 1) / 2.0f).all().item<bool>());
  at::Tensor h = at::full({4096}, static_cast<float>(r + 1), opts.dtype(at::kHalf));
  comm->allreduce(h, xlaunch::ReduceOp::Avg);
  EXPECT_TRUE(h.eq((n + 1) / 2.0f).all().item<bool>());
  at::Tensor b = at::full({33}, r == 0 ? 7.0 : 0.0, opts.dtype(at::kDouble));
  comm->broadcast(b, 0);
  EXPECT_TRUE(b.eq(7.0).all().item<bool>());
  at::Tensor g = comm->allgather(at::full({3}, static_cast<int64_t>(r), opts.dtype(at::kLong)));
  EXPECT_EQ(g.size(0), n);
  EXPECT_EQ(g[n - 1][0].item<int64_t>(), n - 1);
  comm->barrier();
}

// Reduce-scatter against allreduce's chunk, and allgather (in place, as sharded data parallelism
// gathers its shards) against every rank's values: integers from (rank, index), so sums are exact;
// uneven chunks (0, 1, odd); 16-bit types; Sum, Avg, Max.
TEST(Nccl, ReduceScatterAndAllgatherAgainstAllreduce) {
  skip_without_gpu();
  if (IsSkipped()) return;
  const NcclRank nr;
  const int r = nr.r, n = nr.n, device = nr.device;
  const auto& comm = nr.comm;
  const auto on_gpu = at::TensorOptions().device(at::kCUDA, device);
  const auto of = [&](int64_t count, int q, at::ScalarType dtype) {
    return ((at::arange(count, at::kDouble) * 7 + q * 3).remainder(17) - 8).to(on_gpu.dtype(dtype));
  };
  for (auto dtype : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16})
    for (auto op : {xlaunch::ReduceOp::Sum, xlaunch::ReduceOp::Avg, xlaunch::ReduceOp::Max})
      for (int64_t chunk : {0, 1, 7, 1001}) {
        const std::string what = std::string(at::toString(dtype)) + " chunk " + std::to_string(chunk);
        at::Tensor in = of(chunk * n, r, dtype), full = in.clone();
        comm->allreduce(full, op);
        at::Tensor out = at::empty({chunk}, on_gpu.dtype(dtype));
        comm->reduce_scatter(in, out, op);
        EXPECT_TRUE(at::allclose(out.cpu().to(at::kDouble), full.narrow(0, r * chunk, chunk).cpu().to(at::kDouble),
                                 1e-2, 1e-6))
            << what;
        EXPECT_TRUE(in.equal(of(chunk * n, r, dtype))) << what << ": the input is left as it was";
        at::Tensor gathered = at::empty({chunk * n}, on_gpu.dtype(dtype));
        gathered.narrow(0, r * chunk, chunk).copy_(of(chunk, r, dtype));
        comm->allgather_async(gathered.narrow(0, r * chunk, chunk), gathered)->wait();
        for (int q = 0; q < n; ++q) EXPECT_TRUE(gathered.narrow(0, q * chunk, chunk).equal(of(chunk, q, dtype))) << what;
      }
}

TEST(Nccl, BooleansReduceAsLogicalOrAndAvgIsRefused) {
  skip_without_gpu();
  if (IsSkipped()) return;
  const NcclRank nr;
  const int device = nr.device;
  const auto& comm = nr.comm;
  xlaunch::test::expect_bools_reduce_as_pytorch(*comm, at::Device(at::kCUDA, device));
}

// A world of one completes every collective at once (nothing queued, nothing to poll), and a
// barrier's wait returns with the host past every earlier collective.
TEST(Nccl, ManyCollectivesAndABarrier) {
  skip_without_gpu();
  if (IsSkipped()) return;
  const NcclRank nr;
  const int device = nr.device;
  const auto& comm = nr.comm;
  at::Tensor t = at::zeros({256}, at::TensorOptions().device(at::kCUDA, device));
  for (int k = 0; k < 10000; ++k) {
    t.add_(1);
    comm->allreduce_async(t, xlaunch::ReduceOp::Avg)->wait();
  }
  comm->barrier();
  EXPECT_TRUE(t.eq(10000.0f).all().item<bool>()) << "every rank added 1 per round and the average kept it";
}

TEST(Nccl, DdpGradientsOnTheGpuEqualOneProcess) {
  skip_without_gpu();
  if (IsSkipped()) return;
  xlaunch::AcceleratorOptions o;
  o.gpu_ids = "all";
  xlaunch::Accelerator acc(o);
  ASSERT_TRUE(acc.device().is_cuda());
  torch::manual_seed(3);
  Mlp mlp, reference;
  copy_state(*reference, *mlp);
  auto model = acc.prepare(mlp);
  reference->to(acc.device());
  const auto mine = mlp_batch(acc.process_index(), 0);
  acc.backward(loss_of(model(mine.x.to(acc.device())), mine.y.to(acc.device())));
  std::vector<Batch> parts;
  for (int r = 0; r < acc.num_processes(); ++r) parts.push_back(mlp_batch(r, 0));
  const auto all = concat(parts);
  loss_of(reference(all.x.to(acc.device())), all.y.to(acc.device())).backward();
  auto ref = reference->named_parameters();
  for (const auto& item : mlp->named_parameters())
    EXPECT_LT(rel_err(item.value().grad().cpu(), ref[item.key()].grad().cpu()), 1e-4) << item.key();
}
