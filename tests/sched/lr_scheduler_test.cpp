// Schedulers on real optimizers: the lrs each step sets in SGD and AdamW with two param groups,
// the exact resume (save, load into a fresh optimizer and scheduler, the same lr sequence bitwise)
// for every named schedule and for LibTorch's StepLR, and the refusals of load and step.
#include <gtest/gtest.h>

#include "two_groups.h"
#include "xlaunch/error.h"

namespace {

using xlaunch::ScheduleOptions;
using xlaunch::Scheduler;
using xlaunch::test::kLr0;
using xlaunch::test::kLr1;
using xlaunch::test::lrs_of;

ScheduleOptions options() {
  ScheduleOptions o;
  o.warmup_steps = 3;
  o.total_steps = 12;
  o.power = 2;
  o.lr_end = 1e-3;
  return o;
}

// After k steps each group's lr is its construction lr times the factor at k, in the optimizer.
template <typename Groups>
void expect_lambda_lrs(const std::string& name) {
  Groups g;
  auto s = xlaunch::get_scheduler(name, g.optimizer, options());
  for (int64_t k = 0; k <= 14; ++k) {
    const double f = xlaunch::schedule_factor(name, k, options(), kLr0);
    const std::vector<double> expected{kLr0 * f, kLr1 * f};
    EXPECT_EQ(s->last_lr(), expected) << name << " step " << k;
    EXPECT_EQ(lrs_of(g.optimizer), expected) << name << " step " << k;
    EXPECT_EQ(s->steps(), k);
    s->step();
  }
}

TEST(NamedScheduler, SetsEachGroupsLrInSGDAndAdamW) {
  for (const std::string& name : xlaunch::schedule_names()) {
    expect_lambda_lrs<xlaunch::test::TwoGroupsSGD>(name);
    expect_lambda_lrs<xlaunch::test::TwoGroupsAdamW>(name);
  }
}

// The optimizer steps with the lr the scheduler set: SGD moves w by -lr * grad.
TEST(NamedScheduler, OptimizerStepUsesTheScheduledLr) {
  xlaunch::test::TwoGroupsSGD g;
  auto s = xlaunch::get_scheduler("linear", g.optimizer, options());
  s->step();  // warmup 1/3
  (g.w0.sum() + g.w1.sum()).backward();
  g.optimizer.step();
  EXPECT_FLOAT_EQ(g.w0.item<float>(), static_cast<float>(1.0 - kLr0 / 3));
  EXPECT_FLOAT_EQ(g.w1.item<float>(), static_cast<float>(1.0 - kLr1 / 3));
}

// A scheduler of one kind with its LibTorch scheduler, if any, on its own optimizer.
struct Trial {
  explicit Trial(const std::string& kind) {
    if (kind == "StepLR") {
      step_lr = std::make_unique<torch::optim::StepLR>(g.optimizer, 3, 0.5);
      s = xlaunch::adapt(*step_lr, g.optimizer);
    } else {
      s = xlaunch::get_scheduler(kind, g.optimizer, options());
    }
  }
  std::vector<std::vector<double>> steps(int n) {
    std::vector<std::vector<double>> lrs;
    for (int i = 0; i < n; ++i) {
      s->step();
      lrs.push_back(lrs_of(g.optimizer));
    }
    return lrs;
  }
  xlaunch::test::TwoGroupsSGD g;
  std::unique_ptr<torch::optim::StepLR> step_lr;
  std::unique_ptr<Scheduler> s;
};

TEST(SchedulerResume, ContinuesTheSameLrSequenceBitwise) {
  std::vector<std::string> kinds = xlaunch::schedule_names();
  kinds.push_back("StepLR");
  for (const std::string& kind : kinds) {
    Trial first(kind);
    first.steps(5);
    Trial resumed(kind);
    xlaunch::test::save_and_load(*first.s, *resumed.s);
    EXPECT_EQ(resumed.s->steps(), 5) << kind;
    EXPECT_EQ(lrs_of(resumed.g.optimizer), lrs_of(first.g.optimizer)) << kind;
    EXPECT_EQ(resumed.s->last_lr(), first.s->last_lr()) << kind;
    const auto expected = first.steps(9);
    EXPECT_EQ(resumed.steps(9), expected) << kind;
    if (kind != "constant")  // the test has teeth: without the load the sequence differs
      EXPECT_NE(Trial(kind).steps(9), expected) << kind;
  }
}

TEST(SchedulerResume, NamesAndCountsComeFromTheScheduler) {
  xlaunch::test::TwoGroupsSGD g;
  torch::optim::StepLR step_lr(g.optimizer, 3);
  EXPECT_EQ(xlaunch::adapt(step_lr, g.optimizer)->name(), "StepLR");
  EXPECT_EQ(xlaunch::get_scheduler("cosine", g.optimizer, options())->name(), "cosine");
}

std::string load_error(const Scheduler& from, Scheduler& into) {
  try {
    xlaunch::test::save_and_load(from, into);
  } catch (const xlaunch::UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(SchedulerResume, RefusesAnotherSchedulerOrAnotherNumberOfGroups) {
  Trial cosine("cosine"), linear("linear"), step_lr("StepLR");
  std::string msg = load_error(*cosine.s, *linear.s);
  EXPECT_NE(msg.find("holds a cosine scheduler, this one is linear"), std::string::npos) << msg;
  msg = load_error(*step_lr.s, *cosine.s);
  EXPECT_NE(msg.find("holds a StepLR scheduler, this one is cosine"), std::string::npos) << msg;

  torch::Tensor w = torch::ones({1}).requires_grad_();
  torch::optim::SGD one_group({w}, torch::optim::SGDOptions(0.1));
  auto single = xlaunch::get_scheduler("cosine", one_group, options());
  msg = load_error(*cosine.s, *single);
  EXPECT_NE(msg.find("drove 2 param groups, this optimizer has 1"), std::string::npos) << msg;

  torch::serialize::InputArchive empty;
  try {
    cosine.s->load(empty);
    ADD_FAILURE() << "an empty archive loaded";
  } catch (const xlaunch::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("holds no scheduler state"), std::string::npos) << e.what();
  }
}

TEST(SchedulerStep, AStepScheduleRefusesAMetric) {
  Trial cosine("cosine");
  EXPECT_FALSE(cosine.s->takes_metric());
  try {
    cosine.s->step(0.5);
    ADD_FAILURE() << "step(metric) accepted";
  } catch (const xlaunch::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("takes no metric: call step()"), std::string::npos) << e.what();
  }
}

TEST(SchedulerOptions, GetSchedulerChecksWithTheOptimizersLr) {
  xlaunch::test::TwoGroupsSGD g;
  ScheduleOptions o = options();
  o.lr_end = kLr0;  // polynomial decays from the default lr 0.1 to lr_end: must be below it
  EXPECT_THROW(xlaunch::get_scheduler("polynomial", g.optimizer, o), xlaunch::UsageError);
  EXPECT_THROW(xlaunch::get_scheduler("warmup", g.optimizer, o), xlaunch::UsageError);
}

}  // namespace
