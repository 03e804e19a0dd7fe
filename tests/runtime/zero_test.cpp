// ZeRO stages 1 and 2 with ranks as threads (InProcessCommunicator): training against stage 0 on 2,
// 3 and 4 ranks (SGD with momentum and AdamW with two parameter groups, gradient accumulation, fp16
// steps skipped), replicas bitwise equal after every step, the optimizer state per rank, clipping,
// and the refusals. The layout and the staging ring from literal input: zero_layout_test.cpp.
#include <gtest/gtest.h>

#include <ATen/ops/cat.h>
#include <ATen/ops/full.h>
#include <ATen/ops/ones_like.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/lbfgs.h>
#include <torch/optim/sgd.h>

#include <cmath>
#include <limits>
#include <mutex>

#include "inprocess_ranks.h"
#include "models.h"
#include "xlaunch/accelerator.h"
#include "xlaunch/error.h"

using namespace xlaunch::test;

namespace {

enum class Opt { Sgd, AdamW };

struct Job {
  int world = 2;
  int stage = 0;
  Opt opt = Opt::Sgd;
  int accumulation = 1;
  bool fp16 = false;
  double clip = 0;  // max norm; 0: no clipping
  std::string comm_hook = "none";
  bool by_items = false;  // backward(loss_sum, num_items), with a different batch size per rank
};

struct Result {
  std::vector<at::Tensor> params;  // rank 0's, flattened, after the last step
  std::vector<int64_t> state_bytes;  // per rank
  int skipped = 0;
  std::vector<double> norms;  // rank 0's clip_grad_norm_ results
};

at::Tensor flat_params(const torch::nn::Module& m) {
  std::vector<at::Tensor> ps;
  for (const auto& p : m.parameters()) ps.push_back(p.detach().reshape({-1}).clone());
  return at::cat(ps);
}

// 50 optimizer steps of the test MLP on `world` ranks; replicas are compared bitwise after each.
Result train(const Job& s, int steps = 50) {
  torch::manual_seed(5);
  Mlp init;
  Result out;
  out.state_bytes.resize(s.world);
  std::vector<std::vector<at::Tensor>> snapshots(s.world);
  std::mutex mu;
  run_ranks(s.world, [&](std::shared_ptr<xlaunch::InProcessCommunicator> c) {
    xlaunch::AcceleratorOptions o;
    o.cpu = true;
    o.ddp.first_bucket_bytes = 64;
    o.ddp.bucket_cap_mb = 0.002;  // several buckets, and pieces that cut parameters
    o.ddp.zero_stage = s.stage;
    o.ddp.comm_hook = s.comm_hook;
    o.gradient_accumulation_steps = s.accumulation;
    if (s.fp16) {
      o.mixed_precision = "fp16";
      o.scaler.init_scale = 1024;
    }
    xlaunch::Accelerator acc(o, c);
    Mlp mlp;
    copy_state(*mlp, *init);
    auto model = acc.prepare(mlp);
    std::unique_ptr<torch::optim::Optimizer> inner;
    if (s.opt == Opt::Sgd) {
      inner = std::make_unique<torch::optim::SGD>(mlp->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
    } else {
      // Weights decay, biases do not: two groups, so pieces split where the groups change.
      std::vector<at::Tensor> weights, biases;
      for (const auto& p : mlp->named_parameters())
        (p.key().find("bias") != std::string::npos ? biases : weights).push_back(p.value());
      std::vector<torch::optim::OptimizerParamGroup> groups;
      groups.emplace_back(weights, std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(0.01).weight_decay(0.1)));
      groups.emplace_back(biases, std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(0.01).weight_decay(0)));
      inner = std::make_unique<torch::optim::AdamW>(groups, torch::optim::AdamWOptions(0.01));
    }
    auto& opt = acc.prepare(*inner);
    int skipped = 0;
    for (int step = 0; step < steps; ++step) {
      for (int micro = 0; micro < s.accumulation; ++micro) {
        acc.accumulate();
        const Batch b = mlp_batch(c->rank(), step * s.accumulation + micro, s.by_items ? 5 + 2 * c->rank() : 8);
        at::Tensor loss = s.by_items ? torch::nn::functional::cross_entropy(
                                           model(b.x), b.y,
                                           torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                                     : loss_of(model(b.x), b.y);
        // fp16: rank 1's loss overflows on steps 3 and 17: every rank skips them.
        if (s.fp16 && c->rank() == 1 % s.world && (step == 3 || step == 17) && micro + 1 == s.accumulation)
          loss = loss * std::numeric_limits<float>::infinity();
        if (s.by_items) acc.backward(loss, static_cast<double>(b.y.size(0)));
        else acc.backward(loss);
        if (s.clip > 0 && acc.sync_gradients()) {
          const double n = acc.clip_grad_norm_(s.clip);
          if (c->rank() == 0) out.norms.push_back(n);
        }
        opt.step();
        opt.zero_grad();
      }
      if (opt.step_was_skipped()) ++skipped;
      const at::Tensor mine = flat_params(*mlp);
      std::lock_guard<std::mutex> lk(mu);
      snapshots[c->rank()].push_back(mine);
    }
    std::lock_guard<std::mutex> lk(mu);
    out.state_bytes[c->rank()] = opt.state_bytes();
    if (c->rank() == 0) {
      out.skipped = skipped;
      for (const auto& p : mlp->parameters()) out.params.push_back(p.detach().clone());
    }
  });
  for (int r = 1; r < s.world; ++r)
    for (int step = 0; step < steps; ++step)
      EXPECT_TRUE(snapshots[r][step].equal(snapshots[0][step])) << "rank " << r << " differs from rank 0 after step " << step;
  return out;
}

void expect_close(const Result& got, const Result& want, double tol) {
  ASSERT_EQ(got.params.size(), want.params.size());
  for (size_t i = 0; i < got.params.size(); ++i) EXPECT_LE(rel_err(got.params[i], want.params[i]), tol) << "parameter " << i;
}

}  // namespace

class ZeroEquivalence : public ::testing::TestWithParam<std::tuple<int, int, Opt>> {};

TEST_P(ZeroEquivalence, MatchesStageZero) {
  const auto [world, stage, opt] = GetParam();
  Job s;
  s.world = world;
  s.opt = opt;
  const Result ref = train(s);
  s.stage = stage;
  const Result got = train(s);
  expect_close(got, ref, 1e-6);
  // Measured: each rank's optimizer state is its shard's.
  for (int r = 0; r < world; ++r)
    EXPECT_LE(static_cast<double>(got.state_bytes[r]), 1.05 * static_cast<double>(ref.state_bytes[r]) / world) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Worlds, ZeroEquivalence,
                         ::testing::Combine(::testing::Values(2, 3, 4), ::testing::Values(1, 2),
                                            ::testing::Values(Opt::Sgd, Opt::AdamW)));

TEST(Zero, AccumulationAndFp16SkipsMatchStageZero) {
  for (int stage : {1, 2}) {
    for (Opt opt : {Opt::Sgd, Opt::AdamW}) {
      Job s;
      s.world = 3;
      s.opt = opt;
      s.accumulation = 2;
      s.fp16 = true;
      const Result ref = train(s);
      EXPECT_EQ(ref.skipped, 2);
      s.stage = stage;
      const Result got = train(s);
      EXPECT_EQ(got.skipped, 2) << "stage " << stage;
      expect_close(got, ref, 1e-6);
    }
  }
}

TEST(Zero, LossSumsOverItemsMatchStageZero) {
  // backward(loss_sum, num_items) scales the averaged gradients at the sync step: at stage 2 that is
  // this rank's shard of them.
  for (int stage : {1, 2}) {
    Job s;
    s.world = 3;
    s.accumulation = 2;
    s.by_items = true;
    const Result ref = train(s, 20);
    s.stage = stage;
    expect_close(train(s, 20), ref, 1e-6);
  }
}

TEST(Zero, ClippingIsOverEveryShard) {
  for (int stage : {1, 2}) {
    Job s;
    s.world = 4;
    s.clip = 0.5;
    const Result ref = train(s, 20);
    s.stage = stage;
    const Result got = train(s, 20);
    ASSERT_EQ(got.norms.size(), ref.norms.size());
    for (size_t i = 0; i < got.norms.size(); ++i) EXPECT_NEAR(got.norms[i], ref.norms[i], 1e-5 * ref.norms[i]) << i;
    expect_close(got, ref, 1e-5);
  }
}

TEST(Zero, SixteenBitHookReduceScattersLikeItsAllreduce) {
  Job s;
  s.world = 2;
  s.comm_hook = "bf16";
  const Result ref = train(s, 20);
  s.stage = 2;
  const Result got = train(s, 20);
  // Both divide by W, round to bf16 and sum two values: the same bits on 2 ranks.
  expect_close(got, ref, 0);
}

TEST(Zero, AdagradAndRmspropMatchStageZero) {
  // Adagrad makes its state in its constructor: rebound to the pieces, not taken for a stepped one.
  for (int which : {0, 1}) {
    std::vector<std::vector<at::Tensor>> finals(3);
    for (int stage : {0, 1, 2}) {
      std::vector<at::Tensor> rank0;
      torch::manual_seed(9);
      Mlp init;
      run_ranks(3, [&](std::shared_ptr<xlaunch::InProcessCommunicator> c) {
        xlaunch::AcceleratorOptions o;
        o.cpu = true;
        o.ddp.first_bucket_bytes = 64;
        o.ddp.bucket_cap_mb = 0.002;
        o.ddp.zero_stage = stage;
        xlaunch::Accelerator acc(o, c);
        Mlp mlp;
        copy_state(*mlp, *init);
        auto model = acc.prepare(mlp);
        std::unique_ptr<torch::optim::Optimizer> inner;
        if (which == 0)
          inner = std::make_unique<torch::optim::Adagrad>(mlp->parameters(),
                                                          torch::optim::AdagradOptions(0.05).initial_accumulator_value(0.1));
        else
          inner = std::make_unique<torch::optim::RMSprop>(mlp->parameters(), torch::optim::RMSpropOptions(0.01).momentum(0.5));
        auto& opt = acc.prepare(*inner);
        for (int step = 0; step < 30; ++step) {
          const Batch b = mlp_batch(c->rank(), step);
          acc.backward(loss_of(model(b.x), b.y));
          opt.step();
          opt.zero_grad();
        }
        if (c->rank() == 0) rank0.push_back(flat_params(*mlp));
      });
      finals[stage] = rank0;
    }
    EXPECT_LE(rel_err(finals[1][0], finals[0][0]), 1e-6) << (which ? "RMSprop" : "Adagrad") << " stage 1";
    EXPECT_LE(rel_err(finals[2][0], finals[0][0]), 1e-6) << (which ? "RMSprop" : "Adagrad") << " stage 2";
  }
}

TEST(Zero, TwoModelsAndTwoOptimizersMatchStageZero) {
  // A generator and a critic, each with its optimizer, trained by one loss: each optimizer shards
  // its own model's buckets.
  std::vector<std::vector<at::Tensor>> finals(3);
  for (int stage : {0, 1, 2}) {
    torch::manual_seed(21);
    Mlp init_a(20, 24, 16), init_b(16, 12, 10);
    run_ranks(3, [&](std::shared_ptr<xlaunch::InProcessCommunicator> c) {
      xlaunch::AcceleratorOptions o;
      o.cpu = true;
      o.ddp.first_bucket_bytes = 64;
      o.ddp.bucket_cap_mb = 0.002;
      o.ddp.zero_stage = stage;
      xlaunch::Accelerator acc(o, c);
      Mlp a(20, 24, 16), b(16, 12, 10);
      copy_state(*a, *init_a);
      copy_state(*b, *init_b);
      auto ma = acc.prepare(a);
      auto mb = acc.prepare(b);
      torch::optim::AdamW adam(a->parameters(), torch::optim::AdamWOptions(0.01));
      torch::optim::SGD sgd(b->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
      auto& oa = acc.prepare(adam);
      auto& ob = acc.prepare(sgd);
      for (int step = 0; step < 25; ++step) {
        const Batch batch = mlp_batch(c->rank(), step);
        acc.backward(loss_of(mb(ma(batch.x)), batch.y));
        oa.step();
        ob.step();
        oa.zero_grad();
        ob.zero_grad();
      }
      if (c->rank() == 0) finals[stage] = {flat_params(*a), flat_params(*b)};
    });
  }
  for (int stage : {1, 2})
    for (size_t m = 0; m < 2; ++m) EXPECT_LE(rel_err(finals[stage][m], finals[0][m]), 1e-6) << "stage " << stage << " model " << m;
}

TEST(Zero, ParameterGroupsAddedAfterPrepareAreRefused) {
  std::string what;
  run_ranks(2, [&](std::shared_ptr<xlaunch::InProcessCommunicator> c) {
    xlaunch::AcceleratorOptions o;
    o.cpu = true;
    o.ddp.zero_stage = 2;
    xlaunch::Accelerator acc(o, c);
    Mlp mlp;
    auto model = acc.prepare(mlp);
    torch::optim::SGD sgd(std::vector<at::Tensor>{mlp->fc1->weight}, torch::optim::SGDOptions(0.1));
    auto& opt = acc.prepare(sgd);
    sgd.add_param_group(torch::optim::OptimizerParamGroup({mlp->fc2->weight}));
    const Batch b = mlp_batch(c->rank(), 0);
    acc.backward(loss_of(model(b.x), b.y));
    try {
      opt.step();
    } catch (const xlaunch::UsageError& e) {
      if (c->rank() == 0) what = e.what();
    }
  });
  EXPECT_NE(what.find("add_param_group"), std::string::npos) << what;
}

TEST(Zero, EveryRankGathersBucketsItsShardHasNothingOf) {
  // One bucket of 2 elements on 4 ranks: ranks 2 and 3 own padding only, and must still take part
  // in the allgather (else the collectives stop matching).
  for (int stage : {1, 2}) {
    std::vector<at::Tensor> after(4);
    run_ranks(4, [&](std::shared_ptr<xlaunch::InProcessCommunicator> c) {
      xlaunch::AcceleratorOptions o;
      o.cpu = true;
      o.ddp.zero_stage = stage;
      xlaunch::Accelerator acc(o, c);
      torch::nn::Linear lin(1, 1);
      auto model = acc.prepare(lin);
      torch::optim::SGD sgd(lin->parameters(), torch::optim::SGDOptions(0.1));
      auto& opt = acc.prepare(sgd);
      for (int step = 0; step < 3; ++step) {
        acc.backward(model(at::full({2, 1}, static_cast<float>(c->rank() + step))).sum());
        opt.step();
        opt.zero_grad();
      }
      after[c->rank()] = at::cat({lin->weight.detach().reshape({-1}), lin->bias.detach().reshape({-1})});
    });
    for (int r = 1; r < 4; ++r) EXPECT_TRUE(after[r].equal(after[0])) << "stage " << stage << " rank " << r;
  }
}

TEST(Zero, RefusesWhatCannotBeSharded) {
  auto message = [](const std::function<void(xlaunch::Accelerator&, Mlp&)>& fn, int stage, const std::string& hook) {
    std::string what;
    run_ranks(1, [&](std::shared_ptr<xlaunch::InProcessCommunicator> c) {
      xlaunch::AcceleratorOptions o;
      o.cpu = true;
      o.ddp.zero_stage = stage;
      o.ddp.comm_hook = hook;
      try {
        xlaunch::Accelerator acc(o, c);
        Mlp mlp;
        fn(acc, mlp);
      } catch (const xlaunch::UsageError& e) {
        what = e.what();
      }
    });
    return what;
  };
  EXPECT_NE(message([](auto& acc, Mlp& m) { acc.prepare(m); }, 2, "powersgd").find("PowerSGD approximates"),
            std::string::npos);
  EXPECT_NE(message([](auto& acc, Mlp& m) { acc.prepare(m); }, 4, "none").find("zero_stage 4 is not built"),
            std::string::npos);
  EXPECT_NE(message(
                [](auto& acc, Mlp& m) {
                  acc.prepare(m);
                  torch::optim::LBFGS lbfgs(m->parameters(), torch::optim::LBFGSOptions(1));
                  acc.prepare(lbfgs);
                },
                1, "none")
                .find("LBFGS cannot be sharded"),
            std::string::npos);
  EXPECT_NE(message(
                [](auto& acc, Mlp& m) {
                  torch::optim::SGD sgd(m->parameters(), torch::optim::SGDOptions(0.1));
                  acc.prepare(sgd);  // before the model
                },
                1, "none")
                .find("belong to no prepared model"),
            std::string::npos);
  EXPECT_NE(message(
                [](auto& acc, Mlp& m) {
                  acc.prepare(m);
                  torch::optim::SGD sgd(m->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
                  for (auto& p : m->parameters()) p.mutable_grad() = at::ones_like(p);
                  sgd.step();
                  acc.prepare(sgd);
                },
                1, "none")
                .find("already has state"),
            std::string::npos);
}
