// Data-parallel training on 2 ranks compared with one process doing the same work: gradients,
// optimizer steps, gradient accumulation, buffers, unused parameters, mismatched models, the
// Accelerator's collectives and mixed precision. Every rank also computes the single-process
// reference itself (it can build every rank's batch).
#include <gtest/gtest.h>

#include <torch/autograd.h>
#include <torch/optim/sgd.h>

#include <ATen/ops/full.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/tensor.h>

#include "ddp_mpi_helpers.h"
#include "xlaunch/error.h"

using xlaunch::Accelerator;
using xlaunch::AcceleratorOptions;
using namespace xlaunch::test;

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

