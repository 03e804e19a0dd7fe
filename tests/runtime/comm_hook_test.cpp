// Communication hooks (ddp.comm_hook) with ranks as threads of one process: the compressed
// allreduce of the fp16/bf16 hooks, PowerSGD's algebra (a low-rank average comes through exactly;
// error feedback loses nothing over steps), the reducer under each hook against one process, and
// PowerSGD's state through save_state/load_state; and every row of the hook table makes its hook.
#include <gtest/gtest.h>

#include <torch/optim/sgd.h>

#include <ATen/ops/full.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/outer.h>
#include <ATen/ops/zeros.h>

#include <cstdlib>
#include <thread>

#include <unistd.h>

#include "comm/inprocess_communicator.h"
#include "ddp/powersgd.h"
#include "inprocess_ranks.h"
#include "models.h"
#include "xlaunch/accelerator.h"
#include "xlaunch/error.h"
#include "xlaunch/extend/comm_hook.h"
#include "scratch_dir.h"

using xlaunch::InProcessCommunicator;
using xlaunch::InProcessGroup;
using xlaunch::PowerSgdBucket;
using xlaunch::ReduceOp;

namespace {

using namespace xlaunch::test;

at::Tensor seeded_randn(std::vector<int64_t> shape, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  return at::randn(shape, gen);
}

void powersgd_round(PowerSgdBucket& b) {
  b.start();
  b.exchange();
  b.complete();
}

}  // namespace

TEST(CompressedAllreduce, AveragesIn16BitsAndEveryRankGetsTheSameValues) {
  for (auto wire : {at::kBFloat16, at::kHalf}) {
    std::vector<at::Tensor> results(3);
    run_ranks(3, [&](std::shared_ptr<InProcessCommunicator> c) {
      at::Tensor a = seeded_randn({100}, 7 + c->rank()), b = seeded_randn({3, 5}, 70 + c->rank());
      c->allreduce_compressed_async({a, b}, ReduceOp::Avg, wire)->wait();
      EXPECT_EQ(b.scalar_type(), at::kFloat);
      results[c->rank()] = at::cat({a, b.view(-1)});
    });
    at::Tensor exact = at::zeros({115});
    for (int r = 0; r < 3; ++r) exact += at::cat({seeded_randn({100}, 7 + r), seeded_randn({3, 5}, 70 + r).view(-1)});
    exact /= 3;
    EXPECT_TRUE(results[0].equal(results[1]) && results[0].equal(results[2])) << at::toString(wire);
    EXPECT_LT(rel_err(results[0], exact), wire == at::kHalf ? 2e-3 : 2e-2) << at::toString(wire);
    EXPECT_GT(rel_err(results[0], exact), 0) << "the values should have travelled in 16 bits";
  }
  EXPECT_THROW(run_ranks(1, [](std::shared_ptr<InProcessCommunicator> c) {
                 c->allreduce_compressed_async({at::ones({2})}, ReduceOp::Avg, at::kFloat);
               }),
               xlaunch::UsageError);
}

TEST(PowerSgd, ALowRankAverageComesThroughExactly) {
  // Each rank's matrix is a multiple of the same u v^T, so the average has rank 1 and a rank-1
  // approximation is exact; the vector is averaged exactly.
  const at::Tensor u = seeded_randn({32}, 1), v = seeded_randn({24}, 2);
  std::vector<at::Tensor> mats(2), vecs(2);
  run_ranks(2, [&](std::shared_ptr<InProcessCommunicator> c) {
    const float a = c->rank() == 0 ? 1.0f : 3.0f;
    at::Tensor m = at::outer(u, v) * a, bias = at::full({24}, a);
    PowerSgdBucket bucket({m, bias}, c, /*rank=*/1, /*seed=*/5);
    EXPECT_TRUE(bucket.compresses());
    powersgd_round(bucket);
    mats[c->rank()] = m;
    vecs[c->rank()] = bias;
  });
  const at::Tensor want = at::outer(u, v) * 2.0f;
  EXPECT_TRUE(mats[0].equal(mats[1]));
  EXPECT_LT(rel_err(mats[0], want), 1e-5);
  EXPECT_TRUE(vecs[0].eq(2.0f).all().item<bool>());
}

TEST(PowerSgd, ErrorFeedbackLosesNothingOverSteps) {
  // With full-rank gradients a rank-1 approximation misses most of each step, but what it misses is
  // carried: after T steps, what was applied plus the ranks' mean error is the exact sum.
  constexpr int kSteps = 6;
  std::vector<at::Tensor> applied(2), errors(2);
  run_ranks(2, [&](std::shared_ptr<InProcessCommunicator> c) {
    at::Tensor g = at::zeros({16, 12});
    PowerSgdBucket bucket({g}, c, 1, 9);
    at::Tensor sum = at::zeros({16, 12});
    for (int t = 0; t < kSteps; ++t) {
      g.copy_(seeded_randn({16, 12}, 100 * t + c->rank()));
      powersgd_round(bucket);
      sum += g;
    }
    applied[c->rank()] = sum;
    errors[c->rank()] = bucket.state().at(1).second.clone();  // "error.0"
  });
  at::Tensor exact = at::zeros({16, 12});
  for (int t = 0; t < kSteps; ++t)
    for (int r = 0; r < 2; ++r) exact += seeded_randn({16, 12}, 100 * t + r) / 2;
  EXPECT_TRUE(applied[0].equal(applied[1]));
  EXPECT_GT(rel_err(applied[0], exact), 0.05) << "rank 1 should not reproduce full-rank gradients";
  EXPECT_LT(rel_err(applied[0] + (errors[0] + errors[1]) / 2, exact), 1e-4);
}

TEST(PowerSgd, ZeroGradientsStayFinite) {
  run_ranks(2, [](std::shared_ptr<InProcessCommunicator> c) {
    at::Tensor g = at::zeros({16, 12});
    PowerSgdBucket bucket({g}, c, 2, 1);
    powersgd_round(bucket);
    EXPECT_TRUE(g.eq(0).all().item<bool>());
  });
}

namespace {
// Two ranks train the test MLP with `hook` for `steps` SGD steps; returns rank 0's parameters and
// checks every rank ends with the same ones.
std::vector<at::Tensor> train(const std::string& hook, int steps, int64_t start_step, bool check_grads_vs_exact,
                              double tol) {
  torch::manual_seed(21);
  Mlp init;
  std::vector<std::vector<at::Tensor>> params(2);
  run_ranks(2, [&](std::shared_ptr<InProcessCommunicator> c) {
    xlaunch::AcceleratorOptions o;
    o.cpu = true;
    o.num_threads = 1;
    o.ddp.comm_hook = hook;
    o.ddp.powersgd_rank = 1;
    o.ddp.powersgd_start_step = start_step;
    xlaunch::Accelerator acc(o, c);
    Mlp mlp;
    copy_state(*mlp, *init);
    auto model = acc.prepare(mlp);
    torch::optim::SGD sgd(mlp->parameters(), 0.1);
    auto& opt = acc.prepare(sgd);
    Mlp ref;
    copy_state(*ref, *mlp);
    for (int s = 0; s < steps; ++s) {
      const auto b = mlp_batch(c->rank(), s);
      acc.backward(loss_of(model(b.x), b.y));
      if (check_grads_vs_exact) {
        const auto all = concat({mlp_batch(0, s), mlp_batch(1, s)});
        ref->zero_grad();
        loss_of(ref(all.x), all.y).backward();
        auto want = ref->named_parameters();
        for (const auto& item : mlp->named_parameters())
          EXPECT_LT(rel_err(item.value().grad(), want[item.key()].grad()), tol) << hook << " step " << s << " " << item.key();
        copy_state(*ref, *mlp);
      }
      opt.step();
      opt.zero_grad();
      if (check_grads_vs_exact) copy_state(*ref, *mlp);
    }
    for (const auto& p : mlp->parameters()) params[c->rank()].push_back(p.detach().clone());
  });
  for (size_t k = 0; k < params[0].size(); ++k) EXPECT_TRUE(params[0][k].equal(params[1][k])) << hook << " param " << k;
  return params[0];
}
}  // namespace

TEST(CommHookReducer, SixteenBitHooksStayWithinTheirPrecisionOfOneProcess) {
  train("bf16", 3, 0, true, 2e-2);
  train("fp16", 3, 0, true, 2e-3);
}

TEST(CommHookReducer, PowerSgdIsExactBeforeItsStartStepAndCompressesAfter) {
  const auto none = train("none", 4, 0, false, 0);
  const auto late = train("powersgd", 4, /*start_step=*/4, true, 1e-5);  // never compresses in 4 steps
  for (size_t k = 0; k < none.size(); ++k) EXPECT_LT(rel_err(late[k], none[k]), 1e-5) << k;
  const auto early = train("powersgd", 4, 0, false, 0);
  double most = 0;
  for (size_t k = 0; k < none.size(); ++k) most = std::max(most, rel_err(early[k], none[k]));
  EXPECT_GT(most, 1e-4) << "rank-1 PowerSGD from step 0 should train differently from exact averaging";
}

TEST(CommHookTable, EveryRowMakesItsHook) {
  for (const auto& row : xlaunch::kCommHooks) {
    xlaunch::ReducerOptions o;
    o.comm_hook = row.name;
    EXPECT_NE(xlaunch::make_comm_hook(o), nullptr) << row.name;
  }
}

TEST(CommHookReducer, AnUnknownHookIsRefusedNamingTheKey) {
  try {
    train("int8", 1, 0, false, 0);
    FAIL();
  } catch (const xlaunch::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("ddp.comm_hook"), std::string::npos) << e.what();
  }
}

TEST(CommHookReducer, PowerSgdStateIsSavedAndRestored) {
  // Train 3 steps, save, train 2 more: the same 2 steps after loading the checkpoint into fresh
  // models give bitwise the same parameters, which needs the error feedback and the warm start back.
  const std::string scratch = xlaunch::test::make_scratch_dir();
  const std::string dir = scratch + "/ckpt";
  torch::manual_seed(5);
  Mlp init;
  auto run = [&](bool resume, bool drop_errors) {
    std::vector<std::vector<at::Tensor>> params(2);
    run_ranks(2, [&](std::shared_ptr<InProcessCommunicator> c) {
      xlaunch::AcceleratorOptions o;
      o.cpu = true;
      o.num_threads = 1;
      o.ddp.comm_hook = "powersgd";
      o.ddp.powersgd_start_step = 1;
      xlaunch::Accelerator acc(o, c);
      Mlp mlp;
      copy_state(*mlp, *init);
      auto model = acc.prepare(mlp);
      torch::optim::SGD sgd(mlp->parameters(), 0.1);
      auto& opt = acc.prepare(sgd);
      auto step = [&](int s) {
        const auto b = mlp_batch(c->rank(), s);
        acc.backward(loss_of(model(b.x), b.y));
        opt.step();
        opt.zero_grad();
      };
      if (resume) {
        acc.load_state(dir);
        EXPECT_EQ(acc.reducer(0).sync_steps(), 3);
        if (drop_errors)
          for (auto& [name, t] : acc.reducer(0).hook_state())
            if (name.find(".error.") != std::string::npos) t.zero_();
      } else {
        for (int s = 0; s < 3; ++s) step(s);
        bool nonzero = false;
        for (auto& [name, t] : acc.reducer(0).hook_state())
          if (name.find(".error.") != std::string::npos) nonzero |= t.abs().sum().item<double>() > 0;
        EXPECT_TRUE(nonzero) << "the error feedback should hold something worth saving";
        acc.save_state(dir);
      }
      for (int s = 3; s < 5; ++s) step(s);
      for (const auto& p : mlp->parameters()) params[c->rank()].push_back(p.detach().clone());
    });
    return params;
  };
  const auto straight = run(false, false);
  const auto resumed = run(true, false);
  const auto without_errors = run(true, true);
  bool differs = false;
  for (int r = 0; r < 2; ++r)
    for (size_t k = 0; k < straight[r].size(); ++k) {
      EXPECT_TRUE(resumed[r][k].equal(straight[r][k])) << "rank " << r << " param " << k;
      differs |= !without_errors[r][k].equal(straight[r][k]);
    }
  EXPECT_TRUE(differs) << "without its error feedback the resumed run should differ: the test would not notice a loss";
  xlaunch::test::remove_scratch_dir(scratch);
}
