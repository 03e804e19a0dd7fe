// SyncBatchNorm against torch::nn::BatchNorm on the concatenated batch, for any communicator (ranks
// as threads, or MPI ranks). Every rank builds the whole batch from a seed and takes its own rows,
// so it can compute what one process computes on all of them.
#pragma once

#include <gtest/gtest.h>

#include <ATen/ops/arange.h>
#include <ATen/ops/randn.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/utils.h>

#include <atomic>
#include <numeric>
#include <optional>
#include <vector>

#include "models.h"
#include "xlaunch/sync_batchnorm.h"

namespace xlaunch::test {

// Passes every collective on to `inner`, counting them: shows which calls communicate.
class CountingCommunicator : public Communicator {
 public:
  explicit CountingCommunicator(std::shared_ptr<Communicator> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string name() const override { return "counting " + inner_->name(); }
  std::shared_ptr<Work> allreduce_async(at::Tensor t, ReduceOp op) override { ++calls; return inner_->allreduce_async(t, op); }
  std::shared_ptr<Work> broadcast_async(at::Tensor t, int root) override { ++calls; return inner_->broadcast_async(t, root); }
  std::shared_ptr<Work> allgather_async(at::Tensor in, at::Tensor out) override {
    ++calls;
    return inner_->allgather_async(in, out);
  }
  std::shared_ptr<Work> barrier_async() override { ++calls; return inner_->barrier_async(); }
  std::atomic<int> calls{0};

 private:
  std::shared_ptr<Communicator> inner_;
};

struct SyncBnCase {
  std::vector<int64_t> rows;        // per rank
  std::vector<int64_t> tail;        // the input's dims after [N, C]: {} for [N, C], {L}, {H, W}, ...
  int64_t channels = 5;
  std::optional<double> momentum = 0.1;  // nullopt: cumulative average
  int steps = 2;                         // training steps (the running statistics accumulate)
};

inline std::vector<int64_t> shape_of(const SyncBnCase& k, int64_t n) {
  std::vector<int64_t> s{n, k.channels};
  s.insert(s.end(), k.tail.begin(), k.tail.end());
  return s;
}

// What one process computes with BatchNorm on the whole batch: step s's input and upstream gradient.
struct BnStep {
  at::Tensor x, dy;
};

inline BnStep whole_batch(const SyncBnCase& k, int step) {
  const int64_t n = std::accumulate(k.rows.begin(), k.rows.end(), int64_t{0});
  auto g = at::make_generator<at::CPUGeneratorImpl>(1000 + step);
  // An offset mean and a small spread: the case where sums of squares lose precision.
  at::Tensor x = at::randn(shape_of(k, n), g) * 0.5 + 3.0;
  at::Tensor dy = at::randn(shape_of(k, n), g);
  return {x, dy};
}

inline void set_affine(at::Tensor weight, at::Tensor bias) {
  torch::NoGradGuard g;
  weight.copy_(at::arange(weight.size(0), at::kFloat) * 0.25 + 0.5);
  bias.copy_(at::arange(bias.size(0), at::kFloat) * -0.1);
}

// This rank runs `k.steps` training steps of a SyncBatchNorm over `comm` on its rows and compares
// each with BatchNorm on the whole batch: outputs, input gradients, weight and bias gradients
// (summed over the ranks), running statistics and step counter (relative 1e-5); then eval mode.
template <typename BatchNorm>
void expect_sync_batchnorm_equals_batchnorm(const SyncBnCase& k, const std::shared_ptr<Communicator>& comm) {
  const int r = comm->rank();
  const int64_t first = std::accumulate(k.rows.begin(), k.rows.begin() + r, int64_t{0});
  const auto options = torch::nn::BatchNormOptions(k.channels).momentum(k.momentum);
  BatchNorm reference(options);
  SyncBatchNorm sync(options);
  set_affine(reference->weight, reference->bias);
  set_affine(sync->weight, sync->bias);
  auto counting = std::make_shared<CountingCommunicator>(comm);
  sync->set_communicator(counting);

  for (int step = 0; step < k.steps; ++step) {
    const BnStep all = whole_batch(k, step);
    at::Tensor x_all = all.x.clone().requires_grad_(true);
    reference->zero_grad();
    at::Tensor y_all = reference(x_all);
    (y_all * all.dy).sum().backward();

    at::Tensor x = all.x.narrow(0, first, k.rows[r]).clone().requires_grad_(true);
    sync->zero_grad();
    const int before = counting->calls;
    at::Tensor y = sync(x);
    EXPECT_EQ(counting->calls - before, 1) << "one allgather per training forward";
    (y * all.dy.narrow(0, first, k.rows[r])).sum().backward();
    EXPECT_EQ(counting->calls - before, 2) << "one allreduce per backward";

    if (k.rows[r] > 0) {
      EXPECT_LT(rel_err(y, y_all.narrow(0, first, k.rows[r])), 1e-5) << "rank " << r << " step " << step;
      EXPECT_LT(rel_err(x.grad(), x_all.grad().narrow(0, first, k.rows[r])), 1e-5) << "rank " << r;
    }
    // The gradient reducer sums the ranks' parameter gradients (then divides by the world size).
    at::Tensor dw = sync->weight.grad().clone(), db = sync->bias.grad().clone();
    comm->allreduce(dw, ReduceOp::Sum);
    comm->allreduce(db, ReduceOp::Sum);
    EXPECT_LT(rel_err(dw, reference->weight.grad()), 1e-5) << "rank " << r << " step " << step;
    EXPECT_LT(rel_err(db, reference->bias.grad()), 1e-5) << "rank " << r << " step " << step;
    EXPECT_LT(rel_err(sync->running_mean, reference->running_mean), 1e-5) << "rank " << r << " step " << step;
    EXPECT_LT(rel_err(sync->running_var, reference->running_var), 1e-5) << "rank " << r << " step " << step;
    EXPECT_EQ(sync->num_batches_tracked.item<int64_t>(), reference->num_batches_tracked.template item<int64_t>());
  }

  // Running statistics: bit-identical on every rank (rank 0's, broadcast, compared exactly).
  for (at::Tensor mine : {sync->running_mean, sync->running_var}) {
    at::Tensor rank0 = mine.clone();
    comm->broadcast(rank0, 0);
    EXPECT_TRUE(rank0.equal(mine)) << "rank " << r << "'s running statistics differ from rank 0's";
  }

  // Eval mode: the running statistics, no communication.
  sync->eval();
  reference->eval();
  const BnStep all = whole_batch(k, 99);
  const int before = counting->calls;
  if (k.rows[r] > 0) {
    torch::NoGradGuard g;
    EXPECT_LT(rel_err(sync(all.x.narrow(0, first, k.rows[r])), reference(all.x).narrow(0, first, k.rows[r])), 1e-5);
  }
  EXPECT_EQ(counting->calls, before) << "eval mode communicated";
}

}  // namespace xlaunch::test
