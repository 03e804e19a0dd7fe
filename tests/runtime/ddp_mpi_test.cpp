// Data-parallel training on 2 ranks compared with one process doing the same work. Every rank
// also computes the single-process reference itself (it can build every rank's batch).
#include <gtest/gtest.h>

#include <torch/autograd.h>
#include <torch/optim/sgd.h>

#include <ATen/ops/full.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/tensor.h>

#include <atomic>
#include <chrono>
#include <map>
#include <thread>

#include "models.h"
#include "xlaunch/accelerator.h"
#include "xlaunch/error.h"
#include "comm/mpi_communicator.h"
#include "comm/shared_memory.h"
#include "comm/shm_communicator.h"

using xlaunch::Accelerator;
using xlaunch::AcceleratorOptions;

namespace {

using namespace xlaunch::test;

AcceleratorOptions cpu_options() {
  AcceleratorOptions o;
  o.cpu = true;
  o.num_threads = 1;
  return o;
}

// Every trainable parameter's gradient of `got` matches `want`'s (relative 1e-5).
void expect_same_grads(torch::nn::Module& got, torch::nn::Module& want, double tol = 1e-5) {
  auto ref = want.named_parameters();
  for (const auto& item : got.named_parameters()) {
    ASSERT_TRUE(item.value().grad().defined()) << item.key();
    EXPECT_LT(rel_err(item.value().grad(), ref[item.key()].grad()), tol) << item.key();
  }
}

// One synced backward of rank r's MLP batch `step` on 2 ranks, and the one-process reference's
// backward on both ranks' batches.
template <typename Model>
void backward_both(Accelerator& acc, Model& model, Mlp& reference, int step) {
  const auto mine = mlp_batch(acc.process_index(), step);
  acc.backward(loss_of(model(mine.x), mine.y));
  const auto all = concat({mlp_batch(0, step), mlp_batch(1, step)});
  loss_of(reference(all.x), all.y).backward();
}

void expect_same_params(torch::nn::Module& got, torch::nn::Module& want, double tol = 1e-5) {
  auto ref = want.named_parameters();
  for (const auto& item : got.named_parameters())
    EXPECT_LT(rel_err(item.value(), ref[item.key()]), tol) << item.key();
}

}  // namespace

TEST(Ddp, MlpGradientsEqualOneProcessOnTheConcatenatedBatch) {
  Accelerator acc(cpu_options());
  torch::manual_seed(acc.process_index());  // different initial weights: prepare must broadcast rank 0's
  Mlp mlp, reference;
  auto model = acc.prepare(mlp);
  at::Tensor w = acc.gather(mlp->fc1->weight.unsqueeze(0));
  EXPECT_TRUE(w[0].equal(w[1])) << "prepare did not broadcast rank 0's parameters";
  copy_state(*reference, *mlp);
  backward_both(acc, model, reference, 0);
  expect_same_grads(*mlp, *reference);
}

TEST(Ddp, ConvBatchNormGradientsEqualOneProcess) {
  Accelerator acc(cpu_options());
  torch::manual_seed(7);
  ConvNet net, reference;
  copy_state(*reference, *net);
  auto model = acc.prepare(net);
  const auto mine = conv_batch(acc.process_index(), 0);
  acc.backward(loss_of(model(mine.x), mine.y));
  // BatchNorm normalises with each rank's own batch statistics (as PyTorch's DDP without
  // SyncBatchNorm), so one process does the same work as two micro-batches whose mean loss is
  // the concatenated batch's.
  for (int r = 0; r < 2; ++r) {
    const auto b = conv_batch(r, 0);
    (loss_of(reference(b.x), b.y) / 2).backward();
  }
  expect_same_grads(*net, *reference);
}

TEST(Ddp, BuffersAreBroadcastFromRankZeroBeforeEachTrainingForward) {
  Accelerator acc(cpu_options());
  torch::manual_seed(7);
  ConvNet net;
  auto model = acc.prepare(net);
  const auto mine = conv_batch(acc.process_index(), 0);
  model(mine.x);  // each rank updates its running statistics with its own batch
  at::Tensor stats = net->b1->running_mean.clone();
  at::Tensor both = acc.gather(stats.unsqueeze(0));
  EXPECT_FALSE(both[0].equal(both[1])) << "the ranks' batches should move their statistics apart";
  { xlaunch::ForwardScope scope(acc, 0); }
  at::Tensor after = acc.gather(net->b1->running_mean.unsqueeze(0));
  EXPECT_TRUE(after[0].equal(both[0]));
  EXPECT_TRUE(after[1].equal(both[0]));
}

class SgdSteps : public ::testing::TestWithParam<std::string> {};

// Shared-memory ("auto") and MPI gradient allreduce give the same training.
TEST_P(SgdSteps, SgdMomentumStepsMatchOneProcess) {
  auto options = cpu_options();
  options.cpu_allreduce = GetParam();
  Accelerator acc(options);
  torch::manual_seed(3);
  Mlp mlp, reference;
  copy_state(*reference, *mlp);
  auto model = acc.prepare(mlp);
  torch::optim::SGD sgd(mlp->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  torch::optim::SGD ref_sgd(reference->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  auto& opt = acc.prepare(sgd);
  for (int step = 0; step < 8; ++step) {
    const auto mine = mlp_batch(acc.process_index(), step);
    acc.backward(loss_of(model(mine.x), mine.y));
    opt.step();
    opt.zero_grad();
    const auto all = concat({mlp_batch(0, step), mlp_batch(1, step)});
    loss_of(reference(all.x), all.y).backward();
    ref_sgd.step();
    ref_sgd.zero_grad();
  }
  expect_same_params(*mlp, *reference);
}

INSTANTIATE_TEST_SUITE_P(Ddp, SgdSteps, ::testing::Values("mpi", "auto"));

TEST(Ddp, GradientAccumulationSyncsOnlyOnTheLastMicroStep) {
  auto options = cpu_options();
  options.gradient_accumulation_steps = 2;
  Accelerator acc(options);
  torch::manual_seed(3);
  Mlp mlp, reference;
  copy_state(*reference, *mlp);
  auto model = acc.prepare(mlp);
  torch::optim::SGD sgd(mlp->parameters(), torch::optim::SGDOptions(0.1));
  torch::optim::SGD ref_sgd(reference->parameters(), torch::optim::SGDOptions(0.1));
  auto& opt = acc.prepare(sgd);
  for (int micro = 0; micro < 4; ++micro) {
    acc.accumulate();
    const auto mine = mlp_batch(acc.process_index(), micro);
    acc.backward(loss_of(model(mine.x), mine.y));
    const auto all = concat({mlp_batch(0, micro), mlp_batch(1, micro)});
    (loss_of(reference(all.x), all.y) / 2).backward();
    at::Tensor g = acc.gather(mlp->fc1->weight.grad().unsqueeze(0));
    if (micro % 2 == 0) {
      EXPECT_FALSE(acc.sync_gradients());
      EXPECT_FALSE(g[0].equal(g[1])) << "micro-step " << micro << " must not communicate";
    } else {
      EXPECT_TRUE(acc.sync_gradients());
      EXPECT_TRUE(g[0].equal(g[1])) << "micro-step " << micro << " must sync";
      expect_same_grads(*mlp, *reference);
      ref_sgd.step();
      ref_sgd.zero_grad();
    }
    opt.step();  // steps only on the sync micro-step
    opt.zero_grad();
  }
  expect_same_params(*mlp, *reference);
}

TEST(Ddp, NoSyncGuardAccumulatesLocally) {
  Accelerator acc(cpu_options());
  torch::manual_seed(3);
  Mlp mlp;
  auto model = acc.prepare(mlp);
  const auto mine = mlp_batch(acc.process_index(), 0);
  {
    auto guard = acc.no_sync();
    acc.backward(loss_of(model(mine.x), mine.y));
  }
  at::Tensor g = acc.gather(mlp->fc3->bias.grad().unsqueeze(0));
  EXPECT_FALSE(g[0].equal(g[1]));
  acc.backward(loss_of(model(mine.x), mine.y));
  g = acc.gather(mlp->fc3->bias.grad().unsqueeze(0));
  EXPECT_TRUE(g[0].equal(g[1]));
}

TEST(Ddp, UnusedParameterIsAClearErrorOnEveryRank) {
  Accelerator acc(cpu_options());
  Mlp mlp(20, 32, 10, /*with_unused=*/true);
  auto model = acc.prepare(mlp);
  const auto mine = mlp_batch(acc.process_index(), 0);
  try {
    acc.backward(loss_of(model(mine.x), mine.y));
    FAIL() << "an unused parameter must be reported";
  } catch (const xlaunch::UsageError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'unused.weight'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'unused.bias'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("find_unused_parameters"), std::string::npos) << msg;
  }
  // The job is still in step: a collective after the error completes on both ranks.
  EXPECT_EQ(acc.reduce(at::ones({1})).item<float>(), 2.0f);
}

TEST(Ddp, FindUnusedParametersReducesThemAsZeros) {
  auto options = cpu_options();
  options.ddp.find_unused_parameters = true;
  Accelerator acc(options);
  torch::manual_seed(3);
  Mlp mlp(20, 32, 10, true), reference(20, 32, 10, true);
  copy_state(*reference, *mlp);
  auto model = acc.prepare(mlp);
  const auto mine = mlp_batch(acc.process_index(), 0);
  acc.backward(loss_of(model(mine.x), mine.y));
  const auto all = concat({mlp_batch(0, 0), mlp_batch(1, 0)});
  loss_of(reference(all.x), all.y).backward();
  for (auto* name : {"fc1.weight", "fc2.bias", "fc3.weight"})
    EXPECT_LT(rel_err(mlp->named_parameters()[name].grad(), reference->named_parameters()[name].grad()), 1e-5);
  EXPECT_TRUE(mlp->unused->weight.grad().eq(0).all().item<bool>());
}

TEST(Ddp, MismatchedModelsFailOnEveryRankNamingTheParameter) {
  Accelerator acc(cpu_options());
  const int hidden = acc.process_index() == 0 ? 32 : 16;
  Mlp mlp(20, hidden, 10);
  try {
    acc.prepare(mlp);
    FAIL() << "mismatched models must be refused";
  } catch (const xlaunch::UsageError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("rank 1 has 'parameter 'fc1.weight' shape [16, 20]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank 0 has 'parameter 'fc1.weight' shape [32, 20]"), std::string::npos) << msg;
  }
  EXPECT_EQ(acc.reduce(at::ones({1})).item<float>(), 2.0f);
}

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

TEST(Ddp, AcceleratorCollectives) {
  Accelerator acc(cpu_options());
  const int r = acc.process_index();
  EXPECT_EQ(acc.num_processes(), 2);
  EXPECT_EQ(acc.is_main_process(), r == 0);
  at::Tensor g = acc.gather(at::full({2}, static_cast<float>(r)));
  EXPECT_TRUE(g.equal(at::tensor({0.f, 0.f, 1.f, 1.f})));
  EXPECT_TRUE(acc.gather(at::scalar_tensor(r + 1.0)).equal(at::tensor({1.0, 2.0}, at::kDouble)));
  EXPECT_EQ(acc.reduce(at::full({1}, r + 1.0), xlaunch::ReduceOp::Avg).item<double>(), 1.5);
  at::Tensor b = at::full({3}, r == 1 ? 9.0f : 0.0f);
  acc.broadcast(b, 1);
  EXPECT_TRUE(b.eq(9.0f).all().item<bool>());
  {
    auto guard = acc.main_process_first();
  }
  acc.wait_for_everyone();
}

TEST(Ddp, ClipGradNormUsesTheSyncedGradients) {
  Accelerator acc(cpu_options());
  torch::manual_seed(3);
  Mlp mlp, reference;
  copy_state(*reference, *mlp);
  auto model = acc.prepare(mlp);
  const auto mine = mlp_batch(acc.process_index(), 0);
  acc.backward(loss_of(model(mine.x), mine.y));
  const double norm = acc.clip_grad_norm_(0.01);
  const auto all = concat({mlp_batch(0, 0), mlp_batch(1, 0)});
  loss_of(reference(all.x), all.y).backward();
  double sq = 0;
  for (auto& p : reference->parameters()) sq += p.grad().pow(2).sum().item<double>();
  EXPECT_NEAR(norm, std::sqrt(sq), 1e-4 * std::sqrt(sq));
  double clipped = 0;
  for (auto& p : mlp->parameters()) clipped += p.grad().pow(2).sum().item<double>();
  EXPECT_NEAR(std::sqrt(clipped), 0.01, 1e-4);
}

TEST(Ddp, Fp16SkipsTheSameStepOnEveryRankWhenOneRankOverflows) {
  auto options = cpu_options();
  options.mixed_precision = "fp16";
  options.scaler.init_scale = 1024;  // 65536 overflows this tiny fp16 MLP on its own at first
  Accelerator acc(options);
  ASSERT_NE(acc.scaler(), nullptr);
  torch::manual_seed(3);
  Mlp mlp;
  auto model = acc.prepare(mlp);
  torch::optim::SGD sgd(mlp->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  auto& opt = acc.prepare(sgd);
  int step = 0;
  // Rank 1's fc2 gradient overflows at step 2 (inf) and step 4 (NaN).
  auto hook = mlp->fc2->weight.register_hook([&](const at::Tensor& g) {
    if (acc.process_index() != 1 || (step != 2 && step != 4)) return g;
    at::Tensor bad = g.clone();
    bad.view(-1)[5] = step == 2 ? std::numeric_limits<float>::infinity() : std::nan("");
    return bad;
  });
  for (step = 0; step < 6; ++step) {
    const double scale_before = acc.scaler()->get_scale();
    at::Tensor before = mlp->fc1->weight.detach().clone();
    const auto mine = mlp_batch(acc.process_index(), step);
    acc.backward(loss_of(model(mine.x), mine.y));
    opt.step();
    opt.zero_grad();
    const bool bad = step == 2 || step == 4;
    EXPECT_EQ(opt.step_was_skipped(), bad) << "step " << step;
    EXPECT_EQ(acc.optimizer_step_was_skipped(), bad) << "step " << step;
    EXPECT_EQ(mlp->fc1->weight.equal(before), bad) << "step " << step;
    EXPECT_EQ(acc.scaler()->get_scale(), bad ? scale_before / 2 : scale_before) << "step " << step;
    at::Tensor scales = acc.gather(at::full({1}, acc.scaler()->get_scale(), at::kDouble));
    EXPECT_EQ(scales[0].item<double>(), scales[1].item<double>());
    at::Tensor w = acc.gather(mlp->fc1->weight.detach().unsqueeze(0));
    EXPECT_TRUE(w[0].equal(w[1])) << "ranks diverged at step " << step;
  }
  mlp->fc2->weight.remove_hook(hook);
}

TEST(Ddp, Bf16ForwardRunsUnderAutocastThroughThePreparedModel) {
  auto options = cpu_options();
  options.mixed_precision = "bf16";
  Accelerator acc(options);
  EXPECT_EQ(acc.scaler(), nullptr);
  torch::manual_seed(3);
  Mlp mlp;
  auto model = acc.prepare(mlp);
  const auto mine = mlp_batch(acc.process_index(), 0);
  at::Tensor out = model(mine.x);
  EXPECT_EQ(out.scalar_type(), at::kBFloat16);
  EXPECT_EQ(mlp->forward(mine.x).scalar_type(), at::kFloat);  // outside the prepared call: fp32
  acc.backward(loss_of(out.to(at::kFloat), mine.y));
  EXPECT_EQ(mlp->fc1->weight.grad().scalar_type(), at::kFloat);
  at::Tensor g = acc.gather(mlp->fc1->weight.grad().unsqueeze(0));
  EXPECT_TRUE(g[0].equal(g[1]));
}

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

class CommHooks : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

// Each hook over MPI and over shared memory: every rank ends with the same parameters, and the
// 16-bit hooks stay within their precision of one process doing the same work.
TEST_P(CommHooks, EveryRankTrainsTheSameModel) {
  const auto& [hook, transport] = GetParam();
  auto options = cpu_options();
  options.cpu_allreduce = transport;
  options.ddp.comm_hook = hook;
  options.ddp.powersgd_start_step = 2;
  options.ddp.powersgd_rank = 2;
  Accelerator acc(options);
  torch::manual_seed(8);
  Mlp mlp, reference;
  copy_state(*reference, *mlp);
  auto model = acc.prepare(mlp);
  torch::optim::SGD sgd(mlp->parameters(), 0.05);
  torch::optim::SGD ref_sgd(reference->parameters(), 0.05);
  auto& opt = acc.prepare(sgd);
  for (int step = 0; step < 6; ++step) {
    backward_both(acc, model, reference, step);
    opt.step();
    opt.zero_grad();
    ref_sgd.step();
    ref_sgd.zero_grad();
  }
  for (const auto& p : mlp->parameters()) {
    at::Tensor both = acc.gather(p.detach().unsqueeze(0));
    EXPECT_TRUE(both[0].equal(both[1])) << hook << " over " << transport;
  }
  if (hook != "powersgd") expect_same_params(*mlp, *reference, hook == "bf16" ? 2e-2 : 2e-3);
  EXPECT_EQ(acc.reducer(0).sync_steps(), 6);
}

INSTANTIATE_TEST_SUITE_P(Ddp, CommHooks,
                         ::testing::Combine(::testing::Values("fp16", "bf16", "powersgd"), ::testing::Values("mpi", "auto")));
