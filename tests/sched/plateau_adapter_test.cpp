// LibTorch's ReduceLROnPlateauScheduler through adapt(): the lrs it sets equal PyTorch's
// torch.optim.lr_scheduler.ReduceLROnPlateau on the same metrics, and a save / load in the middle
// of a plateau (bad epochs counted, cooldown running) continues exactly.
//
// The expected lrs come from PyTorch 2.11 (python3), for optimizer lrs {1.0, 0.5}:
//   ReduceLROnPlateau(opt, mode, factor=0.5, patience, threshold, threshold_mode, cooldown,
//                     min_lr=[0.125, 0.25], eps=1e-8), then one step(m) per metric.
// Every factor, min_lr and metric is a float exactly, because LibTorch's are floats where
// Python's are doubles; those agree only on such values (docs/schedulers.md).
#include <gtest/gtest.h>

#include "two_groups.h"
#include "xlaunch/error.h"

namespace {

using Plateau = torch::optim::ReduceLROnPlateauScheduler;
using Lrs = std::vector<double>;

struct Case {
  Plateau::SchedulerMode mode;
  Plateau::ThresholdMode threshold_mode;
  double threshold;
  int patience, cooldown;
  std::vector<double> metrics;
  std::vector<Lrs> lrs;  // after each metric
};

struct PlateauTrial {
  explicit PlateauTrial(const Case& c)
      : plateau(optimizer, c.mode, 0.5, c.patience, c.threshold, c.threshold_mode, c.cooldown, {0.125f, 0.25f}),
        s(xlaunch::adapt(plateau, optimizer)) {}
  torch::Tensor w0 = torch::zeros({1}).requires_grad_(), w1 = torch::zeros({1}).requires_grad_();
  torch::optim::SGD optimizer{{torch::optim::OptimizerParamGroup({w0}),
                               torch::optim::OptimizerParamGroup({w1}, std::make_unique<torch::optim::SGDOptions>(0.5))},
                              torch::optim::SGDOptions(1.0)};
  Plateau plateau;
  std::unique_ptr<xlaunch::Scheduler> s;
};

const Case kMinRel{Plateau::min, Plateau::rel, 1e-4, 2, 1,
                   {4, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2, 1.5},
                   {{1, .5}, {1, .5}, {1, .5}, {1, .5}, {.5, .25}, {.5, .25}, {.5, .25}, {.5, .25},
                    {.25, .25}, {.25, .25}, {.25, .25}, {.25, .25}, {.125, .25}, {.125, .25}}};
const Case kMaxRel{Plateau::max, Plateau::rel, 0.1, 1, 0,
                   {1, 1.0625, 1.1875, 1.25, 1.25, 2, 2, 2, 2, 2},
                   {{1, .5}, {1, .5}, {1, .5}, {1, .5}, {.5, .25}, {.5, .25}, {.5, .25}, {.25, .25},
                    {.25, .25}, {.125, .25}}};
const Case kMinAbs{Plateau::min, Plateau::abs, 0.5, 0, 2,
                   {10, 9.75, 9, 8.75, 8.5, 8.25, 8, 7},
                   {{1, .5}, {.5, .25}, {.5, .25}, {.5, .25}, {.25, .25}, {.25, .25}, {.25, .25}, {.25, .25}}};

TEST(PlateauAdapter, SetsTheLrsPyTorchSets) {
  for (const Case* c : {&kMinRel, &kMaxRel, &kMinAbs}) {
    PlateauTrial run(*c);
    EXPECT_TRUE(run.s->takes_metric());
    EXPECT_EQ(run.s->name(), "ReduceLROnPlateau");
    for (size_t i = 0; i < c->metrics.size(); ++i) {
      run.s->step(c->metrics[i]);
      EXPECT_EQ(xlaunch::test::lrs_of(run.optimizer), c->lrs[i]) << "metric " << i;
      EXPECT_EQ(run.s->last_lr(), c->lrs[i]) << "metric " << i;
      EXPECT_EQ(run.s->steps(), static_cast<int64_t>(i + 1));
    }
  }
}

// Saved after every prefix of each case (bad epochs and cooldown in every state they reach): the
// resumed scheduler sets the same lrs as the one that never stopped.
TEST(PlateauAdapter, ResumeContinuesExactly) {
  for (const Case* c : {&kMinRel, &kMaxRel, &kMinAbs}) {
    for (size_t cut = 1; cut < c->metrics.size(); ++cut) {
      PlateauTrial first(*c), resumed(*c);
      for (size_t i = 0; i < cut; ++i) first.s->step(c->metrics[i]);
      xlaunch::test::save_and_load(*first.s, *resumed.s);
      EXPECT_EQ(resumed.s->steps(), static_cast<int64_t>(cut));
      for (size_t i = cut; i < c->metrics.size(); ++i) {
        resumed.s->step(c->metrics[i]);
        EXPECT_EQ(xlaunch::test::lrs_of(resumed.optimizer), c->lrs[i]) << "cut " << cut << " metric " << i;
      }
    }
  }
}

// The resume test can fail: after metric 3 the lrs are still the initial ones, so a fresh
// scheduler has the right lrs but not best (3) nor the bad epoch counted, and ends elsewhere.
TEST(PlateauAdapter, LrsAloneDoNotResume) {
  const Case& c = kMinRel;
  const size_t cut = 3;
  PlateauTrial fresh(c);
  for (size_t i = cut; i < c.metrics.size(); ++i) fresh.s->step(c.metrics[i]);
  EXPECT_NE(xlaunch::test::lrs_of(fresh.optimizer), c.lrs.back());
}

TEST(PlateauAdapter, StepWithoutMetricSaysToPassIt) {
  PlateauTrial run(kMinRel);
  try {
    run.s->step();
    ADD_FAILURE() << "step() accepted";
  } catch (const xlaunch::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("call step(metric)"), std::string::npos) << e.what();
  }
}

}  // namespace
