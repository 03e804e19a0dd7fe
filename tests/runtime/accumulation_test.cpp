// Gradient accumulation that weighs every sample once (issue 24, part 4), ranks as threads
// (InProcessCommunicator): the window plan, backward(loss_sum, num_items) against one process on
// one large batch, its bad input, and the optimizer stepping at the end of the loader's epoch.
#include <gtest/gtest.h>

#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <ATen/ops/full.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/tensor.h>

#include <cmath>
#include <limits>
#include <map>
#include <mutex>

#include "ddp/accumulation.h"
#include "inprocess_ranks.h"
#include "masked_batches.h"
#include "xlaunch/error.h"

using xlaunch::AcceleratorOptions;
using xlaunch::InProcessCommunicator;
using xlaunch::MicroStep;
using xlaunch::plan_micro_step;
using namespace xlaunch::test;

namespace {

AcceleratorOptions options(int steps) {
  AcceleratorOptions o;
  o.cpu = true;
  o.num_threads = 1;
  o.gradient_accumulation_steps = steps;
  return o;
}

// Whether each micro-step of `batches` syncs, and its window's length, as "S4" / "-4".
std::string plan_of(int64_t batches, int64_t steps, bool with_loader, int epochs = 1) {
  std::string out;
  int64_t done = 0;
  for (int e = 0; e < epochs; ++e) {
    for (int64_t b = 0; b < batches; ++b) {
      const MicroStep s = plan_micro_step(done, steps, with_loader ? batches - 1 - b : -1);
      out += (s.sync ? "S" : "-") + std::to_string(s.window_length) + " ";
      done = s.next_done;
    }
    out += "| ";
  }
  return out;
}

}  // namespace

TEST(AccumulationPlan, TheLoadersLastBatchEndsAShortWindowAndTheNextEpochStartsANewOne) {
  EXPECT_EQ(plan_of(10, 4, true, 2), "-4 -4 -4 S4 -4 -4 -4 S4 -2 S2 | -4 -4 -4 S4 -4 -4 -4 S4 -2 S2 | ");
  // Without the loader's end (sync_with_dataloader off, or no loader): every 4th, across epochs.
  EXPECT_EQ(plan_of(10, 4, false, 2), "-4 -4 -4 S4 -4 -4 -4 S4 -4 -4 | -4 S4 -4 -4 -4 S4 -4 -4 -4 S4 | ");
  EXPECT_EQ(plan_of(8, 4, true), "-4 -4 -4 S4 -4 -4 -4 S4 | ");
  EXPECT_EQ(plan_of(3, 4, true), "-3 -3 S3 | ");
  EXPECT_EQ(plan_of(3, 1, true), "S1 S1 S1 | ");
  // Several micro-steps on the epoch's last batch (0 batches left): each syncs alone.
  EXPECT_EQ(plan_micro_step(5, 4, 0).window_length, 2);
  EXPECT_EQ(plan_micro_step(0, 4, 0).window_length, 1);
  EXPECT_TRUE(plan_micro_step(0, 4, 0).sync);
  EXPECT_EQ(plan_micro_step(0, 4, 0).next_done, 0);
}

TEST(Accumulation, ScaleGradientsKeepsInfAndNanAndSkipsMissingGradients) {
  at::Tensor a = at::tensor({1.0f, std::numeric_limits<float>::infinity(), -2.0f});
  at::Tensor b = at::tensor({std::nan(""), 4.0});
  xlaunch::scale_gradients({a, at::Tensor(), b}, 0.5);
  EXPECT_FLOAT_EQ(a[0].item<float>(), 0.5f);
  EXPECT_TRUE(std::isinf(a[1].item<float>()));
  EXPECT_FLOAT_EQ(a[2].item<float>(), -1.0f);
  EXPECT_TRUE(std::isnan(b[0].item<double>()));
  EXPECT_DOUBLE_EQ(b[1].item<double>(), 2.0);
}

// The check: micro-batches of 3, 8, 1 and 12 items with masked losses, accumulated on one
// rank (4 micro-steps), two (2 each) and three (2 each, two of them with no item), equal one batch
// of 24; and a second window (22 items) still does, after the divisor has become the first's items.
TEST(Accumulation, MaskedMicroBatchesOfDifferentSizesEqualOneLargeBatchOnOneTwoAndThreeRanks) {
  for (int world : {1, 2, 3}) {
    torch::manual_seed(5);
    Mlp init;
    std::vector<std::vector<std::map<std::string, at::Tensor>>> grads(2, std::vector<std::map<std::string, at::Tensor>>(world));
    run_ranks(world, [&](std::shared_ptr<InProcessCommunicator> c) {
      xlaunch::Accelerator acc(options(static_cast<int>(spread(world, 0).size())), c);
      Mlp mlp;
      copy_state(*mlp, *init);
      auto model = acc.prepare(mlp);
      for (int w = 0; w < 2; ++w) {
        clear_grads(*mlp);
        train_window(acc, model, window_batches(w));
        EXPECT_TRUE(acc.sync_gradients());
        for (const auto& p : mlp->named_parameters()) grads[w][c->rank()][p.key()] = p.value().grad().clone();
      }
    });
    for (int w = 0; w < 2; ++w) {
      Mlp reference;
      copy_state(*reference, *init);
      reference_backward(reference, window_batches(w));
      for (int r = 0; r < world; ++r)
        for (const auto& p : reference->named_parameters())
          EXPECT_LT(rel_err(grads[w][r][p.key()], p.value().grad()), 1e-6)
              << "world " << world << " rank " << r << " window " << w << " " << p.key();
    }
  }
}

// no_sync instead of accumulate(): the window ends at the first backward outside the guard.
TEST(Accumulation, NoSyncWindowsEqualOneLargeBatch) {
  torch::manual_seed(5);
  Mlp init;
  std::vector<Mlp> models(2);
  run_ranks(2, [&](std::shared_ptr<InProcessCommunicator> c) {
    xlaunch::Accelerator acc(options(1), c);
    Mlp mlp;
    copy_state(*mlp, *init);
    auto model = acc.prepare(mlp);
    const auto window = window_batches(0);
    const std::vector<int> mine = spread(2, c->rank());
    {
      auto guard = acc.no_sync();
      const Masked b = window[mine[0]];
      acc.backward(loss_sum_of(model(b.x), b), b.mask.sum());
    }
    const Masked b = window[mine[1]];
    acc.backward(loss_sum_of(model(b.x), b), static_cast<double>(b.items));
    models[c->rank()] = mlp;
  });
  Mlp reference;
  copy_state(*reference, *init);
  reference_backward(reference, window_batches(0));
  for (const auto& m : models)
    for (const auto& p : m->named_parameters())
      EXPECT_LT(rel_err(p.value().grad(), reference->named_parameters()[p.key()].grad()), 1e-6) << p.key();
}

// Two prepared models trained by one loss (an encoder and a head): both are normalised.
TEST(Accumulation, SeveralPreparedModelsAreAllNormalised) {
  torch::manual_seed(5);
  Mlp init;
  std::vector<Mlp> encoders(2);
  std::vector<torch::nn::Linear> heads(2, torch::nn::Linear(nullptr));
  torch::nn::Linear head_init(10, 10);
  run_ranks(2, [&](std::shared_ptr<InProcessCommunicator> c) {
    xlaunch::Accelerator acc(options(2), c);
    Mlp enc;
    copy_state(*enc, *init);
    torch::nn::Linear head(10, 10);
    copy_state(*head, *head_init);
    auto e = acc.prepare(enc);
    auto h = acc.prepare(head);
    auto both = [&](const at::Tensor& x) { return h(torch::relu(e(x))); };
    train_window(acc, both, window_batches(0));
    encoders[c->rank()] = enc;
    heads[c->rank()] = head;
  });
  Mlp ref_enc;
  copy_state(*ref_enc, *init);
  torch::nn::Linear ref_head(10, 10);
  copy_state(*ref_head, *head_init);
  std::vector<at::Tensor> xs, ys, masks;
  for (const auto& b : window_batches(0)) {
    xs.push_back(b.x);
    ys.push_back(b.y);
    masks.push_back(b.mask);
  }
  const Masked all{at::cat(xs), at::cat(ys), at::cat(masks), 24};
  (loss_sum_of(ref_head(torch::relu(ref_enc(all.x))), all) / 24.0).backward();
  for (int r = 0; r < 2; ++r) {
    for (const auto& p : encoders[r]->named_parameters())
      EXPECT_LT(rel_err(p.value().grad(), ref_enc->named_parameters()[p.key()].grad()), 1e-6) << p.key();
    for (const auto& p : heads[r]->named_parameters())
      EXPECT_LT(rel_err(p.value().grad(), ref_head->named_parameters()[p.key()].grad()), 1e-6) << p.key();
  }
}

// Under a communication hook the bucket travels in 16 bits; the normalisation applies to what
// arrives (so within fp16's precision of the exact result).
TEST(Accumulation, Fp16CommunicationHookIsNormalisedToo) {
  torch::manual_seed(5);
  Mlp init;
  std::vector<Mlp> models(2);
  run_ranks(2, [&](std::shared_ptr<InProcessCommunicator> c) {
    AcceleratorOptions o = options(2);
    o.ddp.comm_hook = "fp16";
    xlaunch::Accelerator acc(o, c);
    Mlp mlp;
    copy_state(*mlp, *init);
    auto model = acc.prepare(mlp);
    for (int w = 0; w < 2; ++w) {
      clear_grads(*mlp);
      train_window(acc, model, window_batches(w));
    }
    models[c->rank()] = mlp;
  });
  Mlp reference;
  copy_state(*reference, *init);
  reference_backward(reference, window_batches(1));
  for (const auto& p : models[0]->named_parameters())
    EXPECT_LT(rel_err(p.value().grad(), reference->named_parameters()[p.key()].grad()), 2e-3) << p.key();
}

// Bad input: num_items 0 on every rank fails on every rank, naming it and the fix, at the window's
// sync backward and before any bucket moves (no rank is left waiting).
TEST(Accumulation, NumItemsZeroOnEveryRankFailsOnEveryRank) {
  for (int world : {1, 2, 3}) {
    std::vector<std::string> errors(world);
    run_ranks(world, [&](std::shared_ptr<InProcessCommunicator> c) {
      xlaunch::Accelerator acc(options(2), c);
      Mlp mlp;
      auto model = acc.prepare(mlp);
      try {
        for (int k = 0; k < 2; ++k) {
          acc.accumulate();
          const Masked b = masked_batch(50 + k, 6, 0);
          acc.backward(loss_sum_of(model(b.x), b), k == 0 ? b.mask.sum() : at::scalar_tensor(0, at::kLong));
        }
      } catch (const xlaunch::UsageError& e) {
        errors[c->rank()] = e.what();
      }
    });
    for (int r = 0; r < world; ++r) {
      EXPECT_NE(errors[r].find("num_items 0 on every rank"), std::string::npos) << "world " << world << ": " << errors[r];
      EXPECT_NE(errors[r].find("ignore_index"), std::string::npos) << errors[r];
    }
  }
}

// One rank with items is enough; a negative count on one rank fails on every rank.
TEST(Accumulation, ZeroItemsOnSomeRanksIsFineButANegativeCountFailsEverywhere) {
  std::vector<std::string> errors(3);
  run_ranks(3, [&](std::shared_ptr<InProcessCommunicator> c) {
    xlaunch::Accelerator acc(options(1), c);
    Mlp mlp;
    auto model = acc.prepare(mlp);
    const Masked b = masked_batch(60, 6, c->rank() == 1 ? 2 : 0);
    acc.backward(loss_sum_of(model(b.x), b), b.mask.sum());
    EXPECT_TRUE(mlp->fc1->weight.grad().isfinite().all().item<bool>());
    try {
      acc.backward(loss_sum_of(model(b.x), b), c->rank() == 2 ? -1.0 : 3.0);
    } catch (const xlaunch::UsageError& e) {
      errors[c->rank()] = e.what();
    }
  });
  for (const auto& e : errors) EXPECT_NE(e.find("1 of 3 ranks passed a negative"), std::string::npos) << e;
  EXPECT_NE(errors[2].find("this rank: num_items -1"), std::string::npos) << errors[2];
}

// Uneven inputs: a joined rank cannot take part in the window's count of items, so every rank
// refuses backward(loss_sum, num_items) at its first call, before any collective (no hang).
TEST(Accumulation, NumItemsWithUnevenInputsIsRefusedOnEveryRank) {
  std::vector<std::string> errors(2);
  run_ranks(2, [&](std::shared_ptr<InProcessCommunicator> c) {
    xlaunch::Accelerator acc(options(1), c);
    Mlp mlp;
    auto model = acc.prepare(mlp);
    acc.expect_uneven_inputs();
    const Masked b = masked_batch(80, 6, 1);
    try {
      acc.backward(loss_sum_of(model(b.x), b), b.mask.sum());
    } catch (const xlaunch::UsageError& e) {
      errors[c->rank()] = e.what();
    }
  });
  for (const auto& e : errors) EXPECT_NE(e.find("not supported with uneven inputs"), std::string::npos) << e;
}

// Uneven inputs with accumulation and sync_with_dataloader: each rank would close its last window
// at its own last batch, where the others do not sync; refused on every rank.
TEST(Accumulation, UnevenInputsWithSyncWithDataloaderAreRefusedOnEveryRank) {
  std::vector<std::string> errors(2);
  run_ranks(2, [&](std::shared_ptr<InProcessCommunicator> c) {
    xlaunch::Accelerator acc(options(2), c);
    Mlp mlp;
    auto model = acc.prepare(mlp);
    try {
      acc.expect_uneven_inputs();
    } catch (const xlaunch::UsageError& e) {
      errors[c->rank()] = e.what();
    }
  });
  for (const auto& e : errors) EXPECT_NE(e.find("sync_with_dataloader false"), std::string::npos) << e;
}

TEST(Accumulation, ANumItemsTensorThatIsNotACountOrAMixedWindowIsRefused) {
  run_ranks(1, [](std::shared_ptr<InProcessCommunicator> c) {
    xlaunch::Accelerator acc(options(2), c);
    Mlp mlp;
    auto model = acc.prepare(mlp);
    const Masked b = masked_batch(70, 6, 3);
    try {
      acc.backward(loss_sum_of(model(b.x), b), b.mask);
      FAIL() << "a mask was taken for a count";
    } catch (const xlaunch::UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("0-dim tensor (got a tensor of shape [6])"), std::string::npos) << e.what();
    }
    acc.accumulate();
    acc.backward(loss_of(model(b.x), b.y));
    try {
      acc.backward(loss_sum_of(model(b.x), b), 3.0);
      FAIL() << "a window mixed both forms";
    } catch (const xlaunch::UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("mixes backward(loss) and backward(loss_sum, num_items)"), std::string::npos)
          << e.what();
    }
  });
}

namespace {

// 30 samples of 20 features, label i % 10: with batch_size 3, an epoch of 10 batches.
struct Features : xlaunch::RowDataset {
  int64_t size() const override { return 30; }
  Layout layout() const override { return Layout{{20}, at::kFloat, true, {}, at::kLong}; }
  void write(int64_t index, void* data_row, void* target_row) const override {
    auto* d = static_cast<float*>(data_row);
    for (int k = 0; k < 20; ++k) d[k] = static_cast<float>(std::sin(0.7 * static_cast<double>(index * 20 + k)));
    *static_cast<int64_t*>(target_row) = index % 10;
  }
};

}  // namespace

// The epoch: 10 batches, gradient_accumulation_steps 4: the optimizer steps 3 times per
// epoch (after 4, 4 and 2 batches), the last step's gradient is the mean over its 2 batches, and
// the next epoch starts a new window. With sync_with_dataloader off it steps every 4th batch
// across epochs instead.
TEST(Accumulation, TheOptimizerStepsAtTheEndOfTheLoadersEpochWithTheMeanOfTheShortWindow) {
  for (bool sync_with_dataloader : {true, false}) {
    run_ranks(1, [&](std::shared_ptr<InProcessCommunicator> c) {
      AcceleratorOptions o = options(4);
      o.sync_with_dataloader = sync_with_dataloader;
      xlaunch::Accelerator acc(o, c);
      torch::manual_seed(5);
      Mlp mlp, reference;
      copy_state(*reference, *mlp);
      auto model = acc.prepare(mlp);
      torch::optim::SGD sgd(mlp->parameters(), torch::optim::SGDOptions(0.0));  // the weights stay: one reference
      auto& opt = acc.prepare(sgd);
      xlaunch::LoaderOptions lo;
      lo.batch_size = 3;
      lo.shuffle = false;
      lo.num_workers = 0;
      auto& loader = acc.prepare(xlaunch::Loader(std::make_shared<Features>(), lo));
      ASSERT_EQ(loader.num_batches(), 10);
      std::string syncs;
      std::vector<xlaunch::Batch> window;
      for (int epoch = 0; epoch < 2; ++epoch) {
        for (auto& batch : loader) {
          acc.accumulate();
          window.push_back(batch);
          acc.backward(loss_of(model(batch.data), batch.target));
          syncs += acc.sync_gradients() ? "S" : "-";
          if (acc.sync_gradients()) {
            // What one process gets from the mean loss over the window's own batches.
            std::vector<at::Tensor> xs, ys;
            for (const auto& b : window) {
              xs.push_back(b.data);
              ys.push_back(b.target);
            }
            clear_grads(*reference);
            loss_of(reference(at::cat(xs)), at::cat(ys)).backward();
            for (const auto& p : mlp->named_parameters())
              EXPECT_LT(rel_err(p.value().grad(), reference->named_parameters()[p.key()].grad()), 1e-6)
                  << p.key() << " at the step after " << window.size() << " batches";
            window.clear();
          }
          opt.step();
          opt.zero_grad();
        }
        syncs += "|";
      }
      if (sync_with_dataloader) {
        EXPECT_EQ(syncs, "---S---S-S|---S---S-S|");
        EXPECT_EQ(opt.steps_taken(), 6);
      } else {
        EXPECT_EQ(syncs, "---S---S--|-S---S---S|");
        EXPECT_EQ(opt.steps_taken(), 5);
      }
    });
  }
}
