// Uneven inputs under mpirun (2 and 3 ranks; shared memory and MPI gradient allreduce; ZeRO stage 0,
// and stage 3, where a joined rank repeats its last step's parameter gathers too): ranks whose
// data ends first join the others (Accelerator::join), and the job trains exactly as one process on
// the same samples in the same order: per step, the batches of the ranks that still have one,
// concatenated in rank order, with the loss normalised per nominal global batch (batch size times
// the ranks that contributed), which is what averaging over the contributing ranks computes.
// Double precision, so the comparison can be tight (1e-9 here; the issue asks 1e-6).
#include <gtest/gtest.h>

#include <ATen/ops/cat.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>
#include <ATen/core/grad_mode.h>
#include <torch/nn/modules/container/functional.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/sgd.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "xlaunch/accelerator.h"
#include "xlaunch/process_state.h"
#include "xlaunch/env_vars.h"
#include "xlaunch/error.h"

namespace {

using xlaunch::Accelerator;
using xlaunch::AcceleratorOptions;
using xlaunch::Loader;
using xlaunch::LoaderOptions;

constexpr int64_t kSamples = 1001;
constexpr int64_t kIn = 4, kOut = 2;

// Sample i: features sin(0.37 i + k), targets a fixed function of them.
double feature(int64_t i, int k) { return std::sin(0.37 * static_cast<double>(i) + k); }
double target(int64_t i, int k) { return feature(i, k) * 0.5 - feature(i, k + 2) * 0.25 + 0.1 * k; }

// Samples [first, first + n) of the 1001: one rank's own file, say. The data row ends with the
// sample's global index (not a feature: the model reads the first kIn columns).
struct Rows : xlaunch::RowDataset {
  Rows(int64_t first, int64_t n) : first(first), n(n) {}
  int64_t size() const override { return n; }
  Layout layout() const override { return Layout{{kIn + 1}, at::kDouble, true, {kOut}, at::kDouble}; }
  void write(int64_t index, void* data_row, void* target_row) const override {
    for (int k = 0; k < kIn; ++k) static_cast<double*>(data_row)[k] = feature(first + index, k);
    static_cast<double*>(data_row)[kIn] = static_cast<double>(first + index);
    for (int k = 0; k < kOut; ++k) static_cast<double*>(target_row)[k] = target(first + index, k);
  }
  int64_t first, n;
};

// Its two Linears are entries of a Sequential: at ddp.zero_stage 3, two units.
struct NetImpl : torch::nn::Module {
  NetImpl() {
    layers = register_module("layers", torch::nn::Sequential(torch::nn::Linear(kIn, 8), torch::nn::Functional([](at::Tensor t) { return t.tanh(); }),
                                                             torch::nn::Linear(8, kOut)));
    to(at::kDouble);
  }
  at::Tensor forward(const at::Tensor& x) { return layers->forward(x); }
  torch::nn::Sequential layers{nullptr};
};
TORCH_MODULE(Net);

// The data of the dataset indices `ids` of a Rows(0, kSamples).
std::pair<at::Tensor, at::Tensor> rows_of(const std::vector<int64_t>& ids) {
  std::vector<double> x, y;
  for (int64_t i : ids) {
    for (int k = 0; k < kIn; ++k) x.push_back(feature(i, k));
    for (int k = 0; k < kOut; ++k) y.push_back(target(i, k));
  }
  const auto n = static_cast<int64_t>(ids.size());
  return {at::tensor(x, at::kDouble).reshape({n, kIn}), at::tensor(y, at::kDouble).reshape({n, kOut})};
}

constexpr int64_t kBatch = 51;
constexpr double kClip = 0.5, kLr = 0.05;

// "mpi", or "mpi:3": the transport, and the ZeRO stage after a colon (0 without).
AcceleratorOptions options(const std::string& param) {
  AcceleratorOptions o;
  o.cpu = true;
  o.num_threads = 1;
  const size_t colon = param.find(':');
  o.cpu_allreduce = param.substr(0, colon);
  if (colon != std::string::npos) o.ddp.zero_stage = std::stoi(param.substr(colon + 1));
  o.ddp.bucket_cap_mb = 0.0001;  // a bucket per parameter: the joined rank issues several
  return o;
}

// Per epoch, per rank: the global sample ids of each of its batches.
using Plan = std::vector<std::vector<std::vector<std::vector<int64_t>>>>;

// One process on the same samples: step k trains on the k-th batch of every rank that has one.
void train_reference(Net& net, const Plan& plan, int64_t batch_size) {
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(kLr).momentum(0.9));
  for (const auto& ranks : plan) {
    size_t steps = 0;
    for (const auto& r : ranks) steps = std::max(steps, r.size());
    for (size_t k = 0; k < steps; ++k) {
      std::vector<int64_t> ids;
      int contributors = 0;
      for (const auto& r : ranks) {
        if (k >= r.size()) continue;
        ++contributors;
        ids.insert(ids.end(), r[k].begin(), r[k].end());
      }
      const auto [x, y] = rows_of(ids);
      ((net(x) - y).pow(2).sum() / static_cast<double>(batch_size * contributors)).backward();
      torch::nn::utils::clip_grad_norm_(net->parameters(), kClip);
      opt.step();
      opt.zero_grad();
    }
  }
}

// Trains the prepared net over `loader` for `epochs`, with the loss per nominal batch; `slow(k)`
// runs before step k's forward and again before its backward. Returns each epoch's global sample
// ids as this rank read them.
std::vector<std::vector<int64_t>> train(Accelerator& acc, xlaunch::PreparedModel<Net>& model, Loader& loader,
                                        int64_t epochs, const std::function<void(int64_t)>& slow = {}) {
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(kLr).momentum(0.9));
  auto& opt = acc.prepare(sgd);
  const auto nominal = static_cast<double>(loader.options().batch_size);
  std::vector<std::vector<int64_t>> seen(epochs);
  for (int64_t e = 0; e < epochs; ++e) {
    for (auto& batch : loader) {
      const at::Tensor ids = batch.data.select(1, kIn).to(at::kLong);
      seen[e].insert(seen[e].end(), ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel());
      if (slow) slow(batch.index);
      auto out = model(batch.data.narrow(1, 0, kIn));
      if (slow) slow(batch.index);
      acc.backward((out - batch.target).pow(2).sum() / nominal);
      acc.clip_grad_norm_(kClip);
      opt.step();
      opt.zero_grad();
    }
  }
  return seen;
}

// The plan of batches of `batch_size` over each rank's ids, the same every epoch.
Plan plan_of(const std::vector<std::vector<int64_t>>& ids_per_rank, int64_t batch_size, int64_t epochs) {
  Plan plan(epochs);
  for (auto& epoch : plan)
    for (const auto& ids : ids_per_rank) {
      epoch.emplace_back();
      for (size_t b = 0; b < ids.size(); b += batch_size)
        epoch.back().emplace_back(ids.begin() + b, ids.begin() + std::min(ids.size(), b + batch_size));
    }
  return plan;
}

// (The whole model through get_state_dict: at stage 3 the parameters are shards between steps.)
Net reference_like(Accelerator& acc, xlaunch::PreparedModel<Net>& model) {
  Net reference;
  at::NoGradGuard no_grad;
  for (const auto& [name, value] : acc.get_state_dict(model)) reference->named_parameters()[name].copy_(value);
  return reference;
}

// Every rank holds bitwise the same parameters, and they match the reference within tol.
void expect_replicas_equal_and_like(Accelerator& acc, xlaunch::PreparedModel<Net>& model, Net reference, double tol) {
  for (const auto& [name, value] : acc.get_state_dict(model)) {
    const at::Tensor p = value.detach();
    const at::Tensor all = acc.gather(p.reshape({1, -1}));
    for (int r = 1; r < acc.num_processes(); ++r)
      EXPECT_TRUE(all[r].equal(all[0])) << name << ": rank " << r << " differs from rank 0";
    const double diff = (p - reference->named_parameters()[name]).abs().max().item<double>();
    EXPECT_LE(diff, tol) << name;
  }
}

// The ranks' own shards: 10, 7 and 3 batches of 51 on 3 ranks (the last one short), 17 and 3 on 2.
std::vector<int64_t> shard_sizes(int world) {
  if (world == 3) return {510, 357, 134};
  if (world == 2) return {867, 134};
  return {kSamples};
}

class Uneven : public testing::TestWithParam<std::string> {};

TEST_P(Uneven, OwnShardsOf10And7And3BatchesTrainAsOneProcess) {
  const int world = xlaunch::ProcessState::get().world_size(), rank = xlaunch::ProcessState::get().rank();
  const std::vector<int64_t> sizes = shard_sizes(world);
  std::vector<std::vector<int64_t>> ids(world);
  int64_t next = 0;
  for (int r = 0; r < world; ++r)
    for (int64_t i = 0; i < sizes[r]; ++i) ids[r].push_back(next++);
  Accelerator acc(options(GetParam()));
  torch::manual_seed(7);
  auto model = acc.prepare(Net());
  Net reference = reference_like(acc, model);
  LoaderOptions lo;
  lo.batch_size = kBatch;
  lo.shuffle = false;
  lo.num_workers = 1;
  lo.even_batches = false;
  lo.already_sharded = true;
  Loader& loader = acc.prepare(Loader(std::make_shared<Rows>(ids[rank].front(), sizes[rank]), lo));
  constexpr int64_t kEpochs = 2;
  const auto seen = train(acc, model, loader, kEpochs);
  acc.join();  // the loader joined already: a no-op, not a lone shadow step
  for (const auto& epoch : seen) EXPECT_EQ(epoch, ids[rank]);
  train_reference(reference, plan_of(ids, kBatch, kEpochs), kBatch);
  expect_replicas_equal_and_like(acc, model, reference, 1e-9);
}

TEST_P(Uneven, EvenBatchesFalseReadsEverySampleOnceAndTrainsAsOneProcess) {
  const int world = xlaunch::ProcessState::get().world_size(), rank = xlaunch::ProcessState::get().rank();
  Accelerator acc(options(GetParam()));
  torch::manual_seed(11);
  auto model = acc.prepare(Net());
  Net reference = reference_like(acc, model);
  // Shards of 334, 334, 333 (or 501, 500) samples: with these batch sizes the first ranks have one
  // batch more, of a single sample.
  LoaderOptions lo;
  lo.batch_size = world == 3 ? 111 : 125;
  lo.shuffle = false;
  lo.num_workers = 1;
  lo.even_batches = false;
  Loader& loader = acc.prepare(Loader(std::make_shared<Rows>(0, kSamples), lo));
  EXPECT_EQ(loader.sampler().padding(), 0);
  constexpr int64_t kEpochs = 2;
  const auto seen = train(acc, model, loader, kEpochs);

  std::vector<std::vector<int64_t>> ids(world);  // the sampler's strided shards: r, r + W, ...
  for (int64_t i = 0; i < kSamples; ++i) ids[i % world].push_back(i);
  for (const auto& epoch : seen) EXPECT_EQ(epoch, ids[rank]);
  std::vector<double> counts(kSamples, 0);  // over the ranks: every sample exactly once per epoch
  for (const auto& epoch : seen)
    for (int64_t i : epoch) counts[i] += 1;
  EXPECT_TRUE(acc.reduce(at::tensor(counts, at::kDouble)).eq(kEpochs).all().item<bool>());
  train_reference(reference, plan_of(ids, lo.batch_size, kEpochs), lo.batch_size);
  expect_replicas_equal_and_like(acc, model, reference, 1e-9);
}

// A loop without a prepared loader: each rank steps through its own batches and calls acc.join()
// when they end.
TEST_P(Uneven, ExplicitJoinWithoutALoaderTrainsAsOneProcess) {
  const int world = xlaunch::ProcessState::get().world_size(), rank = xlaunch::ProcessState::get().rank();
  const std::vector<int64_t> sizes = shard_sizes(world);
  std::vector<std::vector<int64_t>> ids(world);
  int64_t next = 0;
  for (int r = 0; r < world; ++r)
    for (int64_t i = 0; i < sizes[r]; ++i) ids[r].push_back(next++);
  Accelerator acc(options(GetParam()));
  torch::manual_seed(13);
  auto model = acc.prepare(Net());
  Net reference = reference_like(acc, model);
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(kLr).momentum(0.9));
  auto& opt = acc.prepare(sgd);
  const Plan plan = plan_of(ids, kBatch, 1);
  for (const auto& batch : plan[0][rank]) {
    const auto [x, y] = rows_of(batch);
    acc.backward((model(x) - y).pow(2).sum() / static_cast<double>(kBatch));
    acc.clip_grad_norm_(kClip);
    opt.step();
    opt.zero_grad();
  }
  acc.join();
  train_reference(reference, plan, kBatch);
  expect_replicas_equal_and_like(acc, model, reference, 1e-9);
}

// Each at stage 0 and at stage 3, where a joined rank repeats its last step's gathers too.
INSTANTIATE_TEST_SUITE_P(Transports, Uneven, testing::Values("auto", "mpi", "auto:3", "mpi:3"));

// Run by uneven_watchdog_mpi_test with XLAUNCH_TIMEOUT_S=2: rank 0 has 4 batches, the others 1, and
// rank 0's later steps take 2.4 s (1.2 s before the forward, 1.2 s before the backward), so the
// joined ranks wait longer than the timeout in each of those steps' first collective. The job must
// not be declared stuck (it would end with 124 and this test would not finish), and still train
// as one process.
TEST(UnevenWatchdog, AJoinedRankWaitsLongerThanTheTimeoutWithoutAVerdict) {
  if (xlaunch::env::get_int(xlaunch::env::kTimeoutS) != 2)
    GTEST_SKIP() << "run by uneven_watchdog_mpi_test, with XLAUNCH_TIMEOUT_S=2";
  const int world = xlaunch::ProcessState::get().world_size(), rank = xlaunch::ProcessState::get().rank();
  std::vector<std::vector<int64_t>> ids(world);
  int64_t next = 0;
  for (int r = 0; r < world; ++r)
    for (int64_t i = 0; i < (r == 0 ? 4 : 1) * kBatch; ++i) ids[r].push_back(next++);
  Accelerator acc(options("auto"));
  torch::manual_seed(3);
  auto model = acc.prepare(Net());
  Net reference = reference_like(acc, model);
  LoaderOptions lo;
  lo.batch_size = kBatch;
  lo.shuffle = false;
  lo.num_workers = 0;
  lo.already_sharded = true;
  lo.even_batches = false;
  Loader& loader = acc.prepare(Loader(std::make_shared<Rows>(ids[rank].front(), ids[rank].size()), lo));
  train(acc, model, loader, 1, [rank](int64_t step) {
    if (rank == 0 && step >= 1) std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  });
  train_reference(reference, plan_of(ids, kBatch, 1), kBatch);
  expect_replicas_equal_and_like(acc, model, reference, 1e-9);
}

// Bad input: shards of different batch counts with even_batches true would leave the ranks waiting
// for each other's missing steps; every rank refuses it in prepare, naming each rank's count.
TEST(UnevenBadInput, AlreadyShardedShardsOfDifferentCountsWithEvenBatchesFailOnEveryRank) {
  const int world = xlaunch::ProcessState::get().world_size(), rank = xlaunch::ProcessState::get().rank();
  if (world == 1) GTEST_SKIP() << "needs several ranks";
  Accelerator acc(options("mpi"));
  LoaderOptions lo;
  lo.batch_size = 10;
  lo.already_sharded = true;
  try {
    acc.prepare(Loader(std::make_shared<Rows>(0, rank == 0 ? 30 : 10), lo));
    ADD_FAILURE() << "no error";
  } catch (const xlaunch::UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("(rank 0: 3, rank 1: 1"), std::string::npos) << what;
    EXPECT_NE(what.find("Set even_batches false"), std::string::npos) << what;
  }
  // Equal counts are fine, and need no join.
  acc.prepare(Loader(std::make_shared<Rows>(0, rank == 0 ? 30 : 25), lo));
}

struct WithBufferImpl : torch::nn::Module {
  WithBufferImpl() {
    fc = register_module("fc", torch::nn::Linear(kIn, kOut));
    seen = register_buffer("seen", at::zeros({1}));
  }
  torch::nn::Linear fc{nullptr};
  at::Tensor seen;
};
TORCH_MODULE(WithBuffer);

// Bad input: with gradient accumulation a joined rank cannot know how many forwards (each a buffer
// broadcast) the others' accumulation cycle still holds: refused on every rank at prepare.
TEST(UnevenBadInput, AccumulationWithBroadcastBuffersIsRefused) {
  if (xlaunch::ProcessState::get().world_size() == 1) GTEST_SKIP() << "needs several ranks";
  AcceleratorOptions o = options("auto");
  o.gradient_accumulation_steps = 2;
  o.sync_with_dataloader = false;  // refused by itself with uneven inputs (accumulation_test)
  Accelerator acc(o);
  auto model = acc.prepare(WithBuffer());
  LoaderOptions lo;
  lo.even_batches = false;
  try {
    acc.prepare(Loader(std::make_shared<Rows>(0, 10), lo));
    ADD_FAILURE() << "no error";
  } catch (const xlaunch::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("Set ddp.broadcast_buffers false"), std::string::npos) << e.what();
  }
}

}  // namespace
