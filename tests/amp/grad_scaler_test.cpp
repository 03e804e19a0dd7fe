// GradScaler semantics in one process: options, scale, unscale_ once per step, skipping, growth,
// state_dict, pass-through when disabled, the unscale helper, and two ranks as threads.
#include <gtest/gtest.h>

#include <ATen/ops/_amp_foreach_non_finite_check_and_unscale.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/full.h>
#include <ATen/ops/ones.h>
#include <torch/cuda.h>

#include <thread>

#include "skip_scenario.h"
#include "xlaunch/error.h"
#include "comm/inprocess_communicator.h"
#include "usage_error.h"

namespace {

using xlaunch::GradScaler;
using xlaunch::GradScalerOptions;
using xlaunch::UsageError;

constexpr float kInf = std::numeric_limits<float>::infinity();

struct Model {
  at::Tensor w = at::ones({3}).requires_grad_(true);
  torch::optim::SGD opt{{w}, torch::optim::SGDOptions(0.5)};
  // Sets w's gradient to `g` times the scaler's current scale, as a scaled backward would.
  void set_grad(const GradScaler& s, std::vector<float> g) {
    w.mutable_grad() = at::tensor(g) * s.get_scale();
  }
};

TEST(GradScalerOptions, AreValidatedWithTheirNames) {
  auto make = [](auto edit) {
    GradScalerOptions o;
    edit(o);
    return [o] { GradScaler s(o); };
  };
  EXPECT_NE(xlaunch::test::usage_error_of(make([](auto& o) { o.growth_factor = 1.0; })).find("growth_factor=1 must be > 1"), std::string::npos);
  EXPECT_NE(xlaunch::test::usage_error_of(make([](auto& o) { o.backoff_factor = 1.0; })).find("backoff_factor=1 must be in (0, 1)"), std::string::npos);
  EXPECT_NE(xlaunch::test::usage_error_of(make([](auto& o) { o.backoff_factor = 0.0; })).find("backoff_factor=0"), std::string::npos);
  EXPECT_NE(xlaunch::test::usage_error_of(make([](auto& o) { o.growth_interval = 0; })).find("growth_interval=0"), std::string::npos);
  EXPECT_NE(xlaunch::test::usage_error_of(make([](auto& o) { o.init_scale = -1; })).find("init_scale=-1"), std::string::npos);
  EXPECT_EQ(xlaunch::test::usage_error_of(make([](auto&) {})), "(no UsageError)");
  const GradScaler defaults;
  EXPECT_EQ(defaults.get_scale(), 65536.0);
  EXPECT_EQ(defaults.options().growth_interval, 2000);
}

TEST(GradScaler, ScaleMultipliesInFloat32) {
  GradScaler s;
  EXPECT_EQ(s.scale(at::full({}, 3.0)).item<float>(), 3.0f * 65536);
  const at::Tensor half_loss = at::full({}, 2.0, at::kHalf);  // 2 * 65536 overflows float16
  const at::Tensor scaled = s.scale(half_loss);
  EXPECT_EQ(scaled.scalar_type(), at::kFloat);
  EXPECT_EQ(scaled.item<float>(), 131072.0f);
}

TEST(GradScaler, UnscalesOnceAndStepsWithTrueGradients) {
  GradScaler s;
  Model m;
  m.set_grad(s, {1, 2, -4});
  EXPECT_FALSE(s.is_unscaled(m.opt));
  s.unscale_(m.opt);
  EXPECT_TRUE(s.is_unscaled(m.opt));
  EXPECT_TRUE(m.w.grad().equal(at::tensor(std::vector<float>{1, 2, -4})));
  EXPECT_NE(xlaunch::test::usage_error_of([&] { s.unscale_(m.opt); }).find("already called"), std::string::npos);
  EXPECT_TRUE(s.step(m.opt));  // reuses the unscale above: gradients divided once only
  EXPECT_FALSE(s.last_step_skipped());
  EXPECT_TRUE(m.w.detach().equal(at::tensor(std::vector<float>{0.5f, 0.0f, 3.0f})));
  EXPECT_NE(xlaunch::test::usage_error_of([&] { s.unscale_(m.opt); }).find("after step()"), std::string::npos);
  EXPECT_NE(xlaunch::test::usage_error_of([&] { s.step(m.opt); }).find("already called"), std::string::npos);
  s.update();
  EXPECT_FALSE(s.is_unscaled(m.opt));
  EXPECT_NE(xlaunch::test::usage_error_of([&] { s.update(); }).find("no step()"), std::string::npos);
}

TEST(GradScaler, SkipsNonFiniteStepsAndBacksOff) {
  GradScalerOptions o;
  o.growth_interval = 2;
  GradScaler s(o);
  Model m;
  for (float bad : {kInf, -kInf, std::numeric_limits<float>::quiet_NaN()}) {
    const double before = s.get_scale();
    m.set_grad(s, {1, bad, 1});
    EXPECT_FALSE(s.step(m.opt));
    EXPECT_TRUE(s.last_step_skipped());
    EXPECT_TRUE(m.w.detach().equal(at::ones({3}))) << "parameters must not move on a skipped step";
    s.update();
    EXPECT_EQ(s.get_scale(), before / 2);
    EXPECT_EQ(s.growth_tracker(), 0);
  }
  EXPECT_EQ(s.skipped_steps(), 3);
  m.set_grad(s, {2, 2, 2});
  EXPECT_TRUE(s.step(m.opt));
  EXPECT_FALSE(s.last_step_skipped());
  EXPECT_TRUE(m.w.detach().equal(at::zeros({3})));
}

TEST(GradScaler, GrowsAfterGrowthIntervalCleanStepsOnly) {
  GradScalerOptions o;
  o.init_scale = 8;
  o.growth_interval = 3;
  GradScaler s(o);
  Model m;
  auto iteration = [&](float g) {
    m.set_grad(s, {g, g, g});
    s.step(m.opt);
    s.update();
  };
  iteration(0);
  iteration(0);
  EXPECT_EQ(s.get_scale(), 8);
  EXPECT_EQ(s.growth_tracker(), 2);
  iteration(kInf);  // resets the count
  EXPECT_EQ(s.get_scale(), 4);
  iteration(0);
  iteration(0);
  EXPECT_EQ(s.get_scale(), 4);
  iteration(0);
  EXPECT_EQ(s.get_scale(), 8);
  EXPECT_EQ(s.growth_tracker(), 0);
}

TEST(GradScaler, StopsGrowingBeforeFloat32Overflow) {
  GradScalerOptions o;
  o.init_scale = 3e38;
  o.growth_interval = 1;
  GradScaler s(o);
  Model m;
  m.set_grad(s, {0, 0, 0});
  s.step(m.opt);
  s.update();
  EXPECT_EQ(s.get_scale(), static_cast<double>(3e38f));
}

TEST(GradScaler, StateDictRoundTrip) {
  GradScalerOptions o;
  o.init_scale = 256;
  o.growth_factor = 4;
  o.backoff_factor = 0.25;
  o.growth_interval = 5;
  GradScaler a(o);
  Model m;
  for (float g : {0.0f, kInf, 0.0f, 0.0f}) {
    m.set_grad(a, {g, g, g});
    a.step(m.opt);
    a.update();
  }
  const xlaunch::GradScalerState st = a.state_dict();
  EXPECT_EQ(st.scale, 64);
  EXPECT_EQ(st.growth_tracker, 2);
  GradScaler b;  // default options: everything must come from the state
  b.load_state_dict(st);
  EXPECT_EQ(b.get_scale(), 64);
  EXPECT_EQ(b.growth_tracker(), 2);
  EXPECT_EQ(b.options().growth_factor, 4);
  EXPECT_EQ(b.options().backoff_factor, 0.25);
  EXPECT_EQ(b.options().growth_interval, 5);
  Model mb;
  for (int i = 0; i < 3; ++i) {  // both continue identically: growth after 3 more clean steps
    m.set_grad(a, {0, 0, 0});
    mb.set_grad(b, {0, 0, 0});
    a.step(m.opt);
    b.step(mb.opt);
    a.update();
    b.update();
    EXPECT_EQ(a.get_scale(), b.get_scale());
  }
  EXPECT_EQ(b.get_scale(), 256);
  xlaunch::GradScalerState bad = st;
  bad.backoff_factor = 2;
  EXPECT_THROW(b.load_state_dict(bad), UsageError);
}

TEST(GradScaler, DisabledPassesThrough) {
  GradScalerOptions o;
  o.enabled = false;
  GradScaler s(o);
  Model m;
  const at::Tensor loss = at::full({}, 3.0);
  EXPECT_TRUE(s.scale(loss).is_same(loss));
  EXPECT_EQ(s.get_scale(), 1.0);
  m.w.mutable_grad() = at::full({3}, 2.0);
  s.unscale_(m.opt);
  s.unscale_(m.opt);  // no bookkeeping at all
  EXPECT_TRUE(m.w.grad().equal(at::full({3}, 2.0)));
  EXPECT_TRUE(s.step(m.opt));
  EXPECT_TRUE(m.w.detach().equal(at::zeros({3})));
  s.update();
}

TEST(UnscaleAndCheck, GroupsByDtypeAndHandlesEveryLayout) {
  const at::Tensor f = at::arange(40, at::kFloat) * 8;
  const at::Tensor h = at::arange(20, at::kHalf) * 8;
  const at::Tensor b = at::arange(20, at::kBFloat16) * 8;
  const at::Tensor d = at::arange(10, at::kDouble) * 8;
  const at::Tensor strided = (at::arange(12, at::kFloat) * 8).reshape({3, 4}).t();  // not contiguous
  const at::Tensor found = xlaunch::unscale_and_check_({f, at::Tensor(), h, b, d, strided}, 0.125);
  EXPECT_EQ(found.item<float>(), 0.0f);
  EXPECT_TRUE(f.equal(at::arange(40, at::kFloat)));
  EXPECT_TRUE(h.equal(at::arange(20, at::kHalf)));
  EXPECT_TRUE(b.equal(at::arange(20, at::kBFloat16)));
  EXPECT_TRUE(d.equal(at::arange(10, at::kDouble)));
  EXPECT_TRUE(strided.equal(at::arange(12, at::kFloat).reshape({3, 4}).t()));
  for (const at::Tensor& t : {h, d, strided}) {  // each layout's path reports on its own
    at::Tensor clean = at::ones({4});
    at::Tensor first = t.dim() == 1 ? t[0] : t[0][0];
    first.fill_(kInf);
    EXPECT_EQ(xlaunch::unscale_and_check_({clean, t}, 1.0).item<float>(), 1.0f) << t.dtype();
    first.fill_(0);
  }
  EXPECT_EQ(xlaunch::unscale_and_check_({}, 0.5).item<float>(), 0.0f);
}

TEST(UnscaleAndCheck, CudaMatchesTorchsOwnOp) {
  if (!torch::cuda::is_available())
    GTEST_SKIP() << "no CUDA device (torch::cuda::is_available() is false): the CUDA path of "
                    "unscale_and_check_ is built but cannot run here";
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  std::vector<at::Tensor> ours, theirs;
  for (int64_t n : {1, 1000, 8193, 300000})
    for (auto dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
      ours.push_back((at::arange(n, cuda.dtype(at::kFloat)).remainder(977) - 488).to(dtype));
      theirs.push_back(ours.back().clone());
    }
  for (float bad : {0.0f, kInf, std::numeric_limits<float>::quiet_NaN()}) {
    if (bad != 0.0f) {
      ours[7][500].fill_(bad);
      theirs[7][500].fill_(bad);
    }
    const at::Tensor found = xlaunch::unscale_and_check_(ours, 1.0 / 64);
    // torch's CUDA op takes float32 and float16 only ("not implemented for 'BFloat16'"); a bf16
    // gradient goes through it as float32, which holds every bf16 value, and back: the same
    // rounding of x * inv_scale that our kernel does.
    at::Tensor their_found = at::zeros({1}, cuda.dtype(at::kFloat));
    std::vector<at::Tensor> native, widened;
    for (auto& t : theirs) {
      if (t.scalar_type() == at::kBFloat16) widened.push_back(t.to(at::kFloat));
      else native.push_back(t);
    }
    for (auto* group : {&native, &widened})
      at::_amp_foreach_non_finite_check_and_unscale_(*group, their_found, at::full({1}, 1.0 / 64, cuda.dtype(at::kFloat)));
    for (size_t i = 0, w = 0; i < theirs.size(); ++i)
      if (theirs[i].scalar_type() == at::kBFloat16) theirs[i].copy_(widened[w++]);
    EXPECT_EQ(found.item<float>(), their_found.item<float>());
    for (size_t i = 0; i < ours.size(); ++i)
      EXPECT_TRUE(at::equal(ours[i].nan_to_num(0), theirs[i].nan_to_num(0))) << i;
  }
}

TEST(GradScalerAcrossRanks, EveryRankSkipsTheSameStepsWithThreads) {
  auto group = std::make_shared<xlaunch::InProcessGroup>(2);
  std::vector<std::vector<xlaunch::test::StepRecord>> got(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      try {
        got[r] = xlaunch::test::run_skip_scenario(std::make_shared<xlaunch::InProcessCommunicator>(group, r));
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(errors[r], "") << "rank " << r;
    const auto expected = xlaunch::test::expected_skip_scenario(r);
    ASSERT_EQ(got[r].size(), expected.size());
    for (size_t s = 0; s < expected.size(); ++s) {
      EXPECT_EQ(got[r][s].skipped, expected[s].skipped) << "rank " << r << " step " << s;
      EXPECT_EQ(got[r][s].stepped, expected[s].stepped) << "rank " << r << " step " << s;
      EXPECT_EQ(got[r][s].scale_after_update, expected[s].scale_after_update) << "rank " << r << " step " << s;
      EXPECT_EQ(got[r][s].w_after, expected[s].w_after) << "rank " << r << " step " << s;
    }
  }
}

}  // namespace
