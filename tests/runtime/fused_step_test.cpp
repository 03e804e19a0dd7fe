// The fused optimizer step (optim/fused_step.h) against the optimizers' own step: LibTorch's SGD,
// Adam and AdamW with every option LibTorch has, and xlaunch's Lion; two parameter groups with
// their own options, a learning rate changed every step (as a scheduler does), parameters larger
// than one chunk and of odd sizes, and a parameter without a gradient at some steps.
//
// "Per step": both optimizers start each step from the same parameters and state (LibTorch's are
// copied into the fused one's), so an ulp of difference cannot grow into more; the distance of
// each step is measured in ulps over every parameter and state tensor. The bitwise cases also
// run 1,000 steps without the copy and end equal.
#include <gtest/gtest.h>

#include <ATen/ops/max.h>
#include <ATen/ops/full.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros_like.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <torch/serialize.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "optim/fused_kernels.h"
#include "optim/fused_step.h"
#include "optim/master_state.h"
#include "scratch_dir.h"
#include "xlaunch/accelerator.h"
#include "xlaunch/lion.h"
#include "xlaunch/error.h"

namespace fused_step_test {

using torch::optim::Optimizer;
using torch::optim::OptimizerParamGroup;

// Distance in ulps between two floats of one sign convention (the integers' order is the floats').
int64_t ulps(float a, float b) {
  if (a == b) return 0;
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0 : INT64_MAX;
  auto key = [](float f) {
    int32_t i;
    std::memcpy(&i, &f, 4);
    return i < 0 ? int64_t{INT32_MIN} - i : int64_t{i};
  };
  return std::llabs(key(a) - key(b));
}

int64_t max_ulps(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor x = a.contiguous(), y = b.contiguous();
  const float *p = x.const_data_ptr<float>(), *q = y.const_data_ptr<float>();
  int64_t worst = 0;
  for (int64_t i = 0; i < x.numel(); ++i) worst = std::max(worst, ulps(p[i], q[i]));
  return worst;
}

// The largest |want - got| of a step, in ulps of the step's largest operand at that element (the
// parameter before the step, the update, or the parameter after it): an update that differs by rounding moves the parameter
// by at most that much, where a count of ulps of the result alone would be huge wherever the
// update cancels the parameter to nearly zero.
double max_step_ulps(const at::Tensor& want, const at::Tensor& got, const at::Tensor& before) {
  const float *w = want.const_data_ptr<float>(), *g = got.const_data_ptr<float>(), *b = before.const_data_ptr<float>();
  double worst = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    if (w[i] == g[i]) continue;
    const float big = std::max({std::fabs(b[i]), std::fabs(w[i]), std::fabs(w[i] - b[i])});
    const double ulp = static_cast<double>(std::nextafter(big, INFINITY)) - big;
    worst = std::max(worst, std::fabs(static_cast<double>(w[i]) - g[i]) / ulp);
  }
  return worst;
}

// Every tensor of a parameter's state, in a fixed order (the master of a 16-bit parameter aside).
// SGD without momentum keeps no state, but for a 16-bit parameter's master: none is listed.
std::vector<at::Tensor> state_tensors(Optimizer& o, const at::Tensor& p) {
  const auto it = o.state().find(p.unsafeGetTensorImpl());
  if (it == o.state().end()) return {};
  if (auto* s = dynamic_cast<torch::optim::SGDParamState*>(it->second.get()))
    return s->momentum_buffer().defined() ? std::vector<at::Tensor>{s->momentum_buffer()} : std::vector<at::Tensor>{};
  if (auto* s = dynamic_cast<xlaunch::optim::LionParamState*>(it->second.get())) return {s->exp_avg()};
  if (auto* s = dynamic_cast<torch::optim::AdamParamState*>(it->second.get()))
    return {s->exp_avg(), s->exp_avg_sq(), s->max_exp_avg_sq()};
  auto* s = dynamic_cast<torch::optim::AdamWParamState*>(it->second.get());
  return {s->exp_avg(), s->exp_avg_sq(), s->max_exp_avg_sq()};
}

// Adam's and AdamW's step count: -1 without state; 0 for the other kinds.
int64_t state_step(Optimizer& o, const at::Tensor& p) {
  if (dynamic_cast<torch::optim::SGD*>(&o) || dynamic_cast<xlaunch::optim::Lion*>(&o)) return 0;
  const auto it = o.state().find(p.unsafeGetTensorImpl());
  if (it == o.state().end()) return -1;
  if (auto* s = dynamic_cast<torch::optim::AdamParamState*>(it->second.get())) return s->step();
  if (auto* s = dynamic_cast<torch::optim::AdamWParamState*>(it->second.get())) return s->step();
  return 0;
}

// Parameters of odd sizes, one larger than a chunk (16384 elements) and not a multiple of any
// vector width; two groups.
std::vector<std::vector<at::Tensor>> make_params() {
  torch::manual_seed(11);
  return {{at::randn({40001}), at::randn({37, 91})}, {at::randn({17}), at::randn({3})}};
}

std::vector<std::vector<at::Tensor>> clone_of(const std::vector<std::vector<at::Tensor>>& ps) {
  std::vector<std::vector<at::Tensor>> out;
  for (const auto& g : ps) {
    out.emplace_back();
    for (const auto& p : g) out.back().push_back(p.clone());
  }
  return out;
}

using MakeOptimizer = std::function<std::unique_ptr<Optimizer>(std::vector<OptimizerParamGroup>)>;

struct Case {
  std::string name;
  MakeOptimizer make;  // given the groups with their options set by `group_options`
  std::function<std::unique_ptr<torch::optim::OptimizerOptions>(int group)> group_options;
  bool bitwise;  // equal to the last bit: measured so, and kept so by this test
};

std::vector<OptimizerParamGroup> groups_of(const Case& c, const std::vector<std::vector<at::Tensor>>& ps) {
  std::vector<OptimizerParamGroup> gs;
  for (size_t g = 0; g < ps.size(); ++g) gs.emplace_back(ps[g], c.group_options(static_cast<int>(g)));
  return gs;
}

void set_lr(Optimizer& o, int step) {
  for (size_t g = 0; g < o.param_groups().size(); ++g) {
    auto& opts = o.param_groups()[g].options();
    opts.set_lr((g == 0 ? 1e-2 : 3e-3) * (1.0 - step / 2000.0));
  }
}

// The gradients of step `step`: the same for both; the last parameter has none every 7th step.
// `through`: each gradient is first rounded to this type (that of the 16-bit parameters it is
// compared with), then stored in the parameter's own type.
void set_grads(const std::vector<std::vector<at::Tensor>>& ps, int step, at::ScalarType through = at::kFloat) {
  torch::manual_seed(1000 + step);
  for (size_t g = 0; g < ps.size(); ++g)
    for (size_t i = 0; i < ps[g].size(); ++i) {
      at::Tensor& grad = const_cast<at::Tensor&>(ps[g][i]).mutable_grad();
      const bool none = g + 1 == ps.size() && i + 1 == ps[g].size() && step % 7 == 3;
      grad = none ? at::Tensor()
                  : (at::randn(ps[g][i].sizes()) * (step % 5 == 0 ? 1e-3 : 1.0)).to(through).to(ps[g][i].scalar_type());
    }
}

// The float32 weights the fused step steps: the parameter, or the master of a 16-bit one.
at::Tensor weights_of(Optimizer& o, const at::Tensor& p) {
  if (p.scalar_type() == at::kFloat) return p;
  const auto it = o.state().find(p.unsafeGetTensorImpl());
  if (it == o.state().end()) return p.to(at::kFloat);
  const at::Tensor* m = xlaunch::optim::master_of(*it->second);
  return m && m->defined() ? *m : p.to(at::kFloat);
}

std::vector<std::vector<at::Tensor>> converted(const std::vector<std::vector<at::Tensor>>& ps, at::ScalarType type) {
  std::vector<std::vector<at::Tensor>> out;
  for (const auto& g : ps) {
    out.emplace_back();
    for (const auto& p : g) out.back().push_back(p.to(type));
  }
  return out;
}

struct Distance {
  double params = 0;  // ulps of the step's largest operand (max_step_ulps)
  int64_t state = 0;  // ulps
};

// `steps` steps of LibTorch's step and the fused one; each from the same starting point when
// `resync`. Returns the largest distances of any step.
//
// `type`: the fused optimizer's parameters'. With bfloat16 or float16 its parameters are the
// reference's rounded, their gradients the reference's rounded alike, and what is compared with
// LibTorch's float32 step is the fused step's float32 master; each parameter must equal its
// master rounded after every step.
Distance run(const Case& c, int steps, bool resync, at::ScalarType type = at::kFloat) {
  const bool low = type != at::kFloat;
  const auto ref_params = low ? converted(converted(make_params(), type), at::kFloat) : make_params();
  const auto fused_params = low ? converted(ref_params, type) : clone_of(ref_params);
  auto ref = c.make(groups_of(c, ref_params));
  auto fused = c.make(groups_of(c, fused_params));
  Distance worst;
  for (int step = 0; step < steps; ++step) {
    set_grads(ref_params, step, type);
    set_grads(fused_params, step, type);
    set_lr(*ref, step);
    set_lr(*fused, step);
    std::vector<at::Tensor> before;
    for (const auto& g : ref_params)
      for (const auto& p : g) before.push_back(p.clone());
    ref->step();
    xlaunch::optim::fused_step(*fused);
    size_t k_before = 0;
    for (size_t g = 0; g < ref_params.size(); ++g)
      for (size_t i = 0; i < ref_params[g].size(); ++i) {
        const at::Tensor &a = ref_params[g][i], &p = fused_params[g][i];
        const at::Tensor b = weights_of(*fused, p);
        worst.params = std::max(worst.params, max_step_ulps(a, b, before[k_before++]));
        if (low)
          EXPECT_TRUE(p.equal(b.to(type))) << c.name << " step " << step << ": the parameter is not its master rounded";
        EXPECT_EQ(state_step(*ref, a), state_step(*fused, p)) << c.name << " step " << step;
        const auto sa = state_tensors(*ref, a), sb = state_tensors(*fused, p);
        EXPECT_EQ(sa.size(), sb.size()) << c.name;
        for (size_t k = 0; k < sa.size() && k < sb.size(); ++k) {
          EXPECT_EQ(sa[k].defined(), sb[k].defined()) << c.name << " state " << k;
          if (!sa[k].defined() || !sb[k].defined()) continue;
          worst.state = std::max(worst.state, max_ulps(sa[k], sb[k]));
          if (resync) sb[k].copy_(sa[k]);
        }
        if (resync) {
          at::NoGradGuard no_grad;
          const_cast<at::Tensor&>(b).copy_(a);
          if (low) const_cast<at::Tensor&>(p).copy_(a);  // the master rounded
        }
      }
  }
  return worst;
}

template <class O, class Opts>
Case make_case(std::string name, std::function<Opts(int)> options, bool bitwise) {
  return Case{std::move(name),
              [options](std::vector<OptimizerParamGroup> gs) -> std::unique_ptr<Optimizer> {
                return std::make_unique<O>(std::move(gs), options(0));
              },
              [options](int g) -> std::unique_ptr<torch::optim::OptimizerOptions> {
                return std::make_unique<Opts>(options(g));
              },
              bitwise};
}

using torch::optim::AdamOptions;
using torch::optim::AdamWOptions;
using torch::optim::SGDOptions;
using xlaunch::optim::LionOptions;

std::vector<Case> cases() {
  using torch::optim::Adam;
  using torch::optim::AdamW;
  using torch::optim::SGD;
  return {
      make_case<SGD, SGDOptions>("sgd", [](int) { return SGDOptions(0.01); }, true),
      make_case<SGD, SGDOptions>("sgd_weight_decay", [](int g) { return SGDOptions(0.01).weight_decay(g ? 0 : 1e-2); },
                                 true),
      make_case<SGD, SGDOptions>("sgd_momentum", [](int) { return SGDOptions(0.01).momentum(0.9); }, true),
      make_case<SGD, SGDOptions>(
          "sgd_momentum_dampening", [](int g) { return SGDOptions(0.01).momentum(g ? 0.5 : 0.9).dampening(0.1); }, true),
      make_case<SGD, SGDOptions>(
          "sgd_nesterov_weight_decay",
          [](int) { return SGDOptions(0.01).momentum(0.9).nesterov(true).weight_decay(1e-4); }, true),
      make_case<Adam, AdamOptions>("adam", [](int) { return AdamOptions(1e-3); }, false),
      make_case<Adam, AdamOptions>(
          "adam_weight_decay_betas",
          [](int g) { return AdamOptions(1e-3).weight_decay(1e-2).betas({g ? 0.8 : 0.9, g ? 0.99 : 0.999}).eps(1e-6); },
          false),
      make_case<Adam, AdamOptions>("adam_amsgrad", [](int) { return AdamOptions(1e-3).amsgrad(true); }, false),
      make_case<AdamW, AdamWOptions>("adamw", [](int g) { return AdamWOptions(1e-3).weight_decay(g ? 0 : 0.1); }, false),
      make_case<xlaunch::optim::Lion, LionOptions>("lion", [](int) { return LionOptions(1e-4); }, true),
      make_case<xlaunch::optim::Lion, LionOptions>(
          "lion_weight_decay_betas",
          [](int g) { return LionOptions(1e-4).weight_decay(g ? 0 : 1.0).betas({g ? 0.95 : 0.9, 0.98}); }, true),
      make_case<AdamW, AdamWOptions>("adamw_amsgrad",
                                     [](int) { return AdamWOptions(1e-3).weight_decay(0.01).amsgrad(true); }, false),
  };
}

// With bfloat16 or float16 parameters the fused step keeps float32 master weights and float32
// state, and writes each parameter as its master rounded, in the same pass. Its masters and state
// are then LibTorch's float32 step on the same (rounded) gradients, exactly as close as with
// float32 parameters: bitwise for SGD and Lion, within 3 ulps for Adam and AdamW; each parameter is
// its master rounded to the last bit.
TEST(FusedStep, SixteenBitParametersStepFloat32MastersAsLibTorchStepsFloat32) {
  for (const at::ScalarType type : {at::kBFloat16, at::kHalf})
    for (const Case& c : cases()) {
      const Distance d = run(c, 1000, /*resync=*/true, type);
      std::printf("fused_step case=%s params=%s steps=1000 master_max_ulps_per_step=%.3f state_max_ulps_per_step=%lld\n",
                  c.name.c_str(), c10::toString(type), d.params, static_cast<long long>(d.state));
      EXPECT_EQ(d.state, 0) << c.name << " " << c10::toString(type);
      if (c.bitwise) EXPECT_EQ(d.params, 0) << c.name << " " << c10::toString(type);
      else EXPECT_LE(d.params, 3.0) << c.name << " " << c10::toString(type);
      if (c.bitwise) {  // and without resynchronising: 1,000 steps end equal
        const Distance free = run(c, 1000, /*resync=*/false, type);
        EXPECT_EQ(free.params, 0) << c.name << " " << c10::toString(type);
        EXPECT_EQ(free.state, 0) << c.name << " " << c10::toString(type);
      }
    }
}

// The line rank 0 says names the 16-bit types and the masters' bytes (4 per element).
TEST(FusedStep, TheMastersAreSummedUpByTypeAndBytes) {
  at::Tensor a = at::zeros({1000}, at::kBFloat16), b = at::zeros({250}, at::kHalf), c = at::zeros({7});
  torch::optim::SGD both({a, b, c}, SGDOptions(0.1)), one({a}, SGDOptions(0.1)), none({c}, SGDOptions(0.1));
  EXPECT_EQ(xlaunch::optim::master_weights_summary(both),
            "float32 master weights for 2 bfloat16 and float16 parameters (+5.0 kB)");
  EXPECT_EQ(xlaunch::optim::master_weights_summary(one), "float32 master weights for 1 bfloat16 parameter (+4.0 kB)");
  EXPECT_EQ(xlaunch::optim::master_weights_summary(none), "");
  EXPECT_EQ(xlaunch::optim::master_weights_summary(both, /*sharded=*/true),
            "float32 master weights for this rank's 2 bfloat16 and float16 shard pieces (+5.0 kB)");
}

// Why masters: with bfloat16 state and parameters (LibTorch's own step on a bfloat16 model) an
// update smaller than half a bfloat16 ulp of the weight is lost, every step; the master keeps it.
TEST(FusedStep, MastersKeepUpdatesABfloat16ParameterCannotHold) {
  at::Tensor p = at::full({4096}, 1.0f).to(at::kBFloat16), q = p.clone();
  torch::optim::SGD fused({p}, SGDOptions(1e-3)), libtorch({q}, SGDOptions(1e-3));
  for (int step = 0; step < 100; ++step) {
    p.mutable_grad() = at::full({4096}, 1.0f).to(at::kBFloat16);
    q.mutable_grad() = p.grad().clone();
    xlaunch::optim::fused_step(fused);
    libtorch.step();
  }
  // 1 - 100 * 1e-3 = 0.9: each step's 1e-3 is below half of bfloat16's ulp at 1 (2^-7 / 2).
  EXPECT_EQ(q[0].item<float>(), 1.0f) << "LibTorch's bfloat16 step was expected to lose every update";
  EXPECT_NEAR(weights_of(fused, p)[0].item<float>(), 0.9f, 1e-5);
  EXPECT_EQ(p[0].item<float>(), at::scalar_tensor(weights_of(fused, p)[0].item<float>()).to(at::kBFloat16).item<float>());
}

// A 16-bit parameter written outside the fused step (a model loaded, LibTorch's step, the user's
// own assignment) is stepped from what it now holds: its master is re-seeded from it, where it no
// longer rounds to it; elsewhere the master goes on.
TEST(FusedStep, AParameterWrittenOutsideTheStepReseedsItsMaster) {
  at::Tensor p = at::randn({1000}).to(at::kBFloat16);
  torch::optim::SGD fused({p}, SGDOptions(1e-3));
  at::Tensor ref = p.to(at::kFloat);
  for (int step = 0; step < 20; ++step) {
    p.mutable_grad() = at::randn({1000}).to(at::kBFloat16);
    {
      at::NoGradGuard no_grad;
      ref.add_(p.grad().to(at::kFloat), -1e-3);
    }
    xlaunch::optim::fused_step(fused);
    if (step == 9) {  // the first half of the parameter is overwritten
      at::NoGradGuard no_grad;
      p.narrow(0, 0, 500).fill_(0.5);
      ref.narrow(0, 0, 500).fill_(0.5);
    }
  }
  EXPECT_TRUE(weights_of(fused, p).equal(ref)) << "max difference "
                                               << (weights_of(fused, p) - ref).abs().max().item<float>();
  EXPECT_TRUE(p.equal(ref.to(at::kBFloat16)));
}

// Saved with LibTorch's save(), the masters are in the optimizer's archive ("master" beside each
// state's tensors); LibTorch's load() drops them, and restore_masters() gives them back, after
// which the loaded optimizer steps on exactly as the saved one (without it, the masters would be
// re-made from the rounded parameters: the test shows that differs).
TEST(FusedStep, MastersAreSavedAndRestoredWithTheOptimizersState) {
  for (const Case& c : cases()) {
    if (c.name != "sgd" && c.name != "sgd_momentum" && c.name != "adamw_amsgrad" && c.name != "lion_weight_decay_betas")
      continue;
    const auto ps = converted(make_params(), at::kBFloat16);
    auto fused = c.make(groups_of(c, ps));
    for (int step = 0; step < 10; ++step) {
      set_grads(ps, step, at::kBFloat16);
      xlaunch::optim::fused_step(*fused);
    }
    std::string bytes;
    {
      torch::serialize::OutputArchive out;
      fused->save(out);
      std::ostringstream os;
      out.save_to(os);
      bytes = os.str();
    }
    auto loaded = [&](bool restore) {
      const auto copy = clone_of(ps);
      auto o = c.make(groups_of(c, copy));
      torch::serialize::InputArchive in;
      std::istringstream is(bytes);
      in.load_from(is);
      o->load(in);
      if (restore) {
        EXPECT_EQ(xlaunch::optim::restore_masters(*o, in), 4u) << c.name;
      }
      for (int step = 10; step < 20; ++step) {
        set_grads(copy, step, at::kBFloat16);
        xlaunch::optim::fused_step(*o);
      }
      std::vector<at::Tensor> out;
      for (const auto& g : copy)
        for (const auto& p : g) out.push_back(weights_of(*o, p).clone());
      return out;
    };
    const auto restored = loaded(true), remade = loaded(false);
    for (int step = 10; step < 20; ++step) {
      set_grads(ps, step, at::kBFloat16);
      xlaunch::optim::fused_step(*fused);
    }
    bool differs = false;
    size_t k = 0;
    for (const auto& g : ps)
      for (const auto& p : g) {
        EXPECT_TRUE(restored[k].equal(weights_of(*fused, p))) << c.name << " tensor " << k;
        differs |= !remade[k].equal(weights_of(*fused, p));
        ++k;
      }
    EXPECT_TRUE(differs) << c.name << ": masters re-made from the rounded parameters should differ";
  }
}

// SGD is LibTorch's to the last bit. Adam and AdamW are not, and cannot be: LibTorch takes the
// square root of a large tensor through MKL's vsSqrt, which is off by an ulp at some elements (and
// of a small tensor exactly), so its result depends on the tensor's size; the fused step's square
// root is correctly rounded. The parameters then differ by at most 3 ulps of the step's largest
// operand (AdamStepIsLibTorchsArithmeticWithAnExactSquareRoot shows the square root is all that
// differs); their state (exp_avg, exp_avg_sq, max_exp_avg_sq) is bitwise all the same.
TEST(FusedStep, EachStepEqualsLibTorchsWithEveryOption) {
  for (const Case& c : cases()) {
    const Distance d = run(c, 1000, /*resync=*/true);
    std::printf("fused_step case=%s steps=1000 params_max_ulps_per_step=%.3f state_max_ulps_per_step=%lld\n",
                c.name.c_str(), d.params, static_cast<long long>(d.state));
    EXPECT_EQ(d.state, 0) << c.name;
    if (c.bitwise) EXPECT_EQ(d.params, 0) << c.name;
    else EXPECT_LE(d.params, 3.0) << c.name;
  }
}

// LibTorch's Adam/AdamW step, operation for operation (torch/csrc/api/src/optim/adam.cpp,
// adamw.cpp), but for a correctly rounded square root (through double, which rounds sqrt right for
// float).
void libtorch_adam_exact_sqrt(at::Tensor p, const at::Tensor& g, at::Tensor& m, at::Tensor& v, at::Tensor& vmax,
                              int64_t step, double lr, double wd, bool decoupled, bool amsgrad) {
  at::NoGradGuard no_grad;
  const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
  at::Tensor grad = g;
  if (wd != 0) {
    if (decoupled) p.mul_(1 - lr * wd);
    else grad = grad.add(p, wd);
  }
  const double bc1 = 1 - std::pow(b1, step), bc2 = 1 - std::pow(b2, step);
  m.mul_(b1).add_(grad, 1 - b1);
  v.mul_(b2).addcmul_(grad, grad, 1 - b2);
  at::Tensor src = v;
  if (amsgrad) {
    at::max_out(vmax, v, vmax);
    src = vmax;
  }
  const at::Tensor denom = (src.to(at::kDouble).sqrt().to(at::kFloat) / std::sqrt(bc2)).add_(eps);
  p.addcdiv_(m, denom, -(lr / bc1));
}

TEST(FusedStep, AdamStepIsLibTorchsArithmeticWithAnExactSquareRoot) {
  for (const bool decoupled : {false, true})
    for (const bool amsgrad : {false, true}) {
      torch::manual_seed(3);
      at::Tensor p = at::randn({40001}), want = p.clone();
      at::Tensor m = at::zeros_like(p), v = at::zeros_like(p), vmax = at::zeros_like(p);
      const double wd = 0.05;
      std::unique_ptr<Optimizer> fused;
      if (decoupled) fused = std::make_unique<torch::optim::AdamW>(std::vector<at::Tensor>{p}, AdamWOptions(0).weight_decay(wd).amsgrad(amsgrad));
      else fused = std::make_unique<torch::optim::Adam>(std::vector<at::Tensor>{p}, AdamOptions(0).weight_decay(wd).amsgrad(amsgrad));
      for (int step = 1; step <= 1000; ++step) {
        const double lr = 1e-2 * (1.0 - step / 2000.0);
        fused->param_groups()[0].options().set_lr(lr);
        const at::Tensor g = at::randn({40001}) * (step % 5 == 0 ? 1e-3 : 1.0);
        p.mutable_grad() = g;
        xlaunch::optim::fused_step(*fused);
        libtorch_adam_exact_sqrt(want, g, m, v, vmax, step, lr, wd, decoupled, amsgrad);
        ASSERT_TRUE(p.equal(want)) << (decoupled ? "AdamW" : "Adam") << (amsgrad ? " amsgrad" : "") << ", step " << step
                                   << ": " << max_ulps(p, want) << " ulps";
      }
    }
}

TEST(FusedStep, BitwiseCasesStayEqualOverAThousandSteps) {
  for (const Case& c : cases()) {
    if (!c.bitwise) continue;
    const Distance d = run(c, 1000, /*resync=*/false);
    EXPECT_EQ(d.params, 0) << c.name;
    EXPECT_EQ(d.state, 0) << c.name;
  }
}

// Lion's own step is the paper's update (Chen et al. 2023, Algorithm 2), each element computed
// here in double: p * (1 - lr wd) - lr sign(b1 m + (1 - b1) g), m = b2 m + (1 - b2) g, within an
// ulp of the step's largest operand (max_step_ulps); and sign(0) is 0.
TEST(FusedStep, LionIsThePapersUpdate) {
  torch::manual_seed(4);
  at::Tensor p = at::randn({1000});
  at::Tensor p0 = p.clone();
  p.mutable_grad() = at::randn({1000});
  p.mutable_grad()[0] = 0;  // with a zero momentum: the update's sign is 0
  const double lr = 0.01, wd = 0.5, b1 = 0.9, b2 = 0.99;
  xlaunch::optim::Lion lion({p}, LionOptions(lr).weight_decay(wd).betas({b1, b2}));
  std::vector<double> m(1000, 0.0), want(1000);
  for (int step = 0; step < 3; ++step) {
    const at::Tensor before = p.detach().clone(), g = p.grad().clone();
    lion.step();
    for (int64_t i = 0; i < 1000; ++i) {
      const double gi = g[i].item<float>(), u = b1 * m[static_cast<size_t>(i)] + (1 - b1) * gi;
      const double sign = u > 0 ? 1 : u < 0 ? -1 : 0;
      want[static_cast<size_t>(i)] = before[i].item<float>() * (1 - lr * wd) - lr * sign;
      m[static_cast<size_t>(i)] = b2 * m[static_cast<size_t>(i)] + (1 - b2) * gi;
    }
    const at::Tensor w = at::tensor(want).to(at::kFloat);
    EXPECT_LE(max_step_ulps(w, p.detach(), before), 1.0) << "step " << step;
    p.mutable_grad() = at::randn({1000});
    p.mutable_grad()[0] = 0;
  }
  const float decay = static_cast<float>(1 - lr * wd);
  float decayed = p0[0].item<float>();
  for (int step = 0; step < 3; ++step) decayed = decayed * decay;
  EXPECT_EQ(p[0].item<float>(), decayed)
      << "a zero gradient with zero momentum moves the parameter by its decay only";
}

// The fused step's state is LibTorch's: saved after fused steps, it loads into LibTorch's
// optimizer, which continues as the fused one does (SGD with momentum to the last bit; AdamW
// within its square roots' rounding).
TEST(FusedStep, StateSavedAfterFusedStepsContinuesInLibTorchsStep) {
  for (const Case& c : cases()) {
    if (c.name != "sgd_momentum" && c.name != "adamw_amsgrad" && c.name != "lion_weight_decay_betas") continue;
    const auto ps = make_params();
    const auto copy = clone_of(ps);
    auto fused = c.make(groups_of(c, ps));
    for (int step = 0; step < 10; ++step) {
      set_grads(ps, step);
      xlaunch::optim::fused_step(*fused);
    }
    std::stringstream bytes;
    {
      torch::serialize::OutputArchive out;
      fused->save(out);
      out.save_to(bytes);
    }
    {
      at::NoGradGuard no_grad;
      for (size_t g = 0; g < ps.size(); ++g)
        for (size_t i = 0; i < ps[g].size(); ++i) const_cast<at::Tensor&>(copy[g][i]).copy_(ps[g][i]);
    }
    auto libtorch = c.make(groups_of(c, copy));
    torch::serialize::InputArchive in;
    in.load_from(bytes);
    libtorch->load(in);
    for (int step = 10; step < 20; ++step) {
      set_grads(ps, step);
      set_grads(copy, step);
      xlaunch::optim::fused_step(*fused);
      libtorch->step();
    }
    for (size_t g = 0; g < ps.size(); ++g)
      for (size_t i = 0; i < ps[g].size(); ++i) {
        if (c.bitwise) EXPECT_TRUE(ps[g][i].equal(copy[g][i])) << c.name << " " << g << "/" << i;
        else EXPECT_TRUE(ps[g][i].allclose(copy[g][i], 1e-5, 1e-7)) << c.name << " " << g << "/" << i;
      }
  }
}

// What cannot be fused is named; fused_step refuses it rather than step it wrongly.
TEST(FusedStep, WhatCannotBeFusedIsNamed) {
  using xlaunch::optim::why_not_fused;
  auto expect_refused = [](Optimizer& o, const std::string& words) {
    const std::string why = why_not_fused(o);
    EXPECT_NE(why.find(words), std::string::npos) << "got: " << why;
    EXPECT_THROW(xlaunch::optim::fused_step(o), xlaunch::UsageError);
  };
  at::Tensor p = at::randn({4, 3});
  p.mutable_grad() = at::randn({4, 3});
  torch::optim::RMSprop rms({p}, torch::optim::RMSpropOptions(0.1));
  expect_refused(rms, "not LibTorch's SGD, Adam or AdamW, or xlaunch's Lion");

  torch::optim::SGD twice({p, p}, SGDOptions(0.1));
  expect_refused(twice, "held twice");

  at::Tensor wide = at::randn({8}).to(at::kDouble);
  wide.mutable_grad() = at::randn({8}).to(at::kDouble);
  torch::optim::AdamW doubles({wide}, AdamWOptions(0.1));
  expect_refused(doubles, "is Double (the fused step takes float32, bfloat16 and float16 parameters)");

  at::Tensor half = at::randn({8}).to(at::kBFloat16);
  half.mutable_grad() = at::randn({8});
  torch::optim::AdamW mixed({half}, AdamWOptions(0.1));
  expect_refused(mixed, "gradient is Float (the fused step takes BFloat16 here)");

  // A state LibTorch's own step made for a bfloat16 parameter is bfloat16; the fused step keeps
  // 16-bit parameters' state in float32, so it leaves that optimizer to LibTorch's step.
  torch::optim::AdamW stepped({half}, AdamWOptions(0.1));
  half.mutable_grad() = at::randn({8}).to(at::kBFloat16);
  stepped.step();
  expect_refused(stepped, "exp_avg is BFloat16 (the fused step takes Float here)");

  at::Tensor base = at::randn({6, 5});
  at::Tensor strided = base.t();
  strided.mutable_grad() = at::randn({5, 6});
  torch::optim::Adam views({strided}, AdamOptions(0.1));
  expect_refused(views, "not contiguous");

  // A state of another optimizer's kind (a checkpoint loaded into the wrong type): amsgrad turned
  // on after the state was made without its max_exp_avg_sq.
  at::Tensor q = at::randn({5});
  q.mutable_grad() = at::randn({5});
  torch::optim::AdamW adamw({q}, AdamWOptions(0.1));
  adamw.step();
  static_cast<AdamWOptions&>(adamw.param_groups()[0].options()).amsgrad(true);
  expect_refused(adamw, "max_exp_avg_sq is missing");

  // A parameter without a gradient is skipped, as LibTorch skips it, and no state is made for it.
  at::Tensor idle = at::randn({3});
  torch::optim::AdamW none({idle}, AdamWOptions(0.1));
  EXPECT_EQ(why_not_fused(none), "");
  xlaunch::optim::fused_step(none);
  EXPECT_TRUE(none.state().empty());
}

// A stepped parameter's version moves, as after LibTorch's in-place step: a graph that saved it
// fails in backward instead of using the new values.
TEST(FusedStep, ASteppedParameterIsSeenAsModifiedInPlace) {
  at::Tensor w = at::randn({3}).requires_grad_(true);
  const at::Tensor saved = (w * w).sum();
  w.mutable_grad() = at::ones({3});
  torch::optim::SGD sgd({w}, SGDOptions(0.1));
  xlaunch::optim::fused_step(sgd);
  EXPECT_THROW(saved.backward(), c10::Error);
}

// Through the Accelerator (optimizer.fused): auto steps an optimizer it cannot fuse with
// LibTorch's step and says so once; true refuses it at prepare naming the cause and the fix; the
// fused step trains the prepared model as LibTorch's does.
xlaunch::AcceleratorOptions options(const std::string& fused) {
  xlaunch::AcceleratorOptions o;
  o.cpu = true;
  o.num_threads = 1;
  o.optimizer_fused = fused;
  return o;
}

std::vector<at::Tensor> train_linear(const std::string& fused, bool rmsprop) {
  xlaunch::Accelerator acc(options(fused));
  torch::manual_seed(2);
  torch::nn::Linear net(8, 4);
  auto model = acc.prepare(net);
  std::unique_ptr<Optimizer> inner;
  if (rmsprop) inner = std::make_unique<torch::optim::RMSprop>(net->parameters(), torch::optim::RMSpropOptions(0.01));
  else inner = std::make_unique<torch::optim::AdamW>(net->parameters(), AdamWOptions(0.01));
  auto& opt = acc.prepare(*inner);
  for (int step = 0; step < 20; ++step) {
    torch::manual_seed(100 + step);
    const at::Tensor x = at::randn({16, 8});
    acc.backward(model(x).pow(2).mean());
    opt.step();
    opt.zero_grad();
  }
  std::vector<at::Tensor> out;
  for (const auto& p : net->parameters()) out.push_back(p.detach().clone());
  return out;
}

TEST(FusedStep, TheAcceleratorFusesWhereItCanAndRefusesByNameWhenTold) {
  testing::internal::CaptureStderr();
  const auto fused = train_linear("true", false);
  const auto libtorch = train_linear("false", false);
  const auto fallback = train_linear("auto", true);
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("optimizer 0 (AdamW): the fused step (optimizer.fused true; "), std::string::npos) << said;
  EXPECT_NE(said.find("optimizer 0 (this optimizer type): LibTorch's step, not the fused one, because the optimizer "
                      "is not LibTorch's SGD, Adam or AdamW, or xlaunch's Lion"),
            std::string::npos)
      << said;
  for (size_t i = 0; i < fused.size(); ++i) EXPECT_TRUE(fused[i].allclose(libtorch[i], 1e-5, 1e-7)) << i;
  try {
    train_linear("true", true);
    ADD_FAILURE() << "optimizer.fused true with RMSprop was not refused";
  } catch (const xlaunch::UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("optimizer.fused is true, and optimizer 0 (this optimizer type) cannot take the fused step: "
                        "the optimizer is not LibTorch's SGD, Adam or AdamW, or xlaunch's Lion"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("Set optimizer.fused: auto"), std::string::npos) << what;
  }
}

}  // namespace fused_step_test

namespace fused_step_test {

// A bfloat16 model through the Accelerator: the fused step takes it (saying so, with the masters'
// bytes), and a checkpoint carries the masters, so a run resumed from it (synchronous or
// checkpoint.async) ends bitwise where the run that never stopped ends, masters included.
std::vector<at::Tensor> train_bf16(const std::string& dir, bool save, bool load, bool async) {
  xlaunch::AcceleratorOptions o = options("auto");
  o.checkpoint_async = async;
  xlaunch::Accelerator acc(o);
  torch::manual_seed(2);
  torch::nn::Linear net(64, 32);
  net->to(at::kBFloat16);
  auto model = acc.prepare(net);
  torch::optim::AdamW inner(net->parameters(), AdamWOptions(1e-3).weight_decay(0.01));
  auto& opt = acc.prepare(inner);
  int first = 0;
  if (load) {
    acc.load_state(dir);
    first = 5;
  }
  for (int step = first; step < 10; ++step) {
    if (save && step == 5) acc.save_state(dir);
    torch::manual_seed(100 + step);
    const at::Tensor x = at::randn({16, 64}).to(at::kBFloat16);
    acc.backward(model(x).to(at::kFloat).pow(2).mean());
    opt.step();
    opt.zero_grad();
  }
  acc.wait_for_checkpoint();
  std::vector<at::Tensor> out;
  for (const auto& p : net->parameters()) {
    out.push_back(p.detach().clone());
    out.push_back(weights_of(inner, p).clone());
  }
  return out;
}

TEST(FusedStep, ABfloat16ModelResumesWithItsMastersAsIfNeverStopped) {
  const std::string scratch = xlaunch::test::make_scratch_dir("fused_step");
  for (const bool async : {false, true}) {
    const std::string dir = scratch + (async ? "/async" : "/sync");
    testing::internal::CaptureStderr();
    const auto straight = train_bf16(dir, true, false, async);
    const std::string said = testing::internal::GetCapturedStderr();
    EXPECT_NE(said.find("optimizer 0 (AdamW): the fused step (optimizer.fused auto; "), std::string::npos) << said;
    EXPECT_NE(said.find("; float32 master weights for 2 bfloat16 parameters (+8.3 kB))"), std::string::npos) << said;
    const auto resumed = train_bf16(dir, false, true, async);
    ASSERT_EQ(straight.size(), resumed.size());
    for (size_t k = 0; k < straight.size(); ++k) {
      EXPECT_EQ(straight[k].scalar_type(), k % 2 ? at::kFloat : at::kBFloat16) << k;
      EXPECT_TRUE(straight[k].equal(resumed[k])) << (async ? "async " : "") << "tensor " << k;
    }
  }
  xlaunch::test::remove_scratch_dir(scratch);
}

}  // namespace fused_step_test

namespace fused_step_test {

// A float16 model with the GradScaler (mixed_precision fp16), through the Accelerator: the scaler
// unscales the float16 gradients in place and checks them, and the fused step then steps float32
// masters from them, as LibTorch's SGD (momentum, weight decay) steps a float32 copy of the model
// on the same unscaled gradients: the masters bitwise equal to the copy after every step, each
// parameter its master rounded. A step whose scaled gradients overflow float16 (the first, before
// any state exists, and a later one) is skipped on every count (parameters, masters, state) and the
// scale backs off; the next steps go on from there.
TEST(FusedStep, AFloat16ModelWithTheGradScalerStepsItsMastersAndSkipsOverflows) {
  xlaunch::AcceleratorOptions o = options("true");
  o.mixed_precision = "fp16";
  xlaunch::Accelerator acc(o);
  ASSERT_NE(acc.scaler(), nullptr);
  torch::manual_seed(2);
  torch::nn::Linear net(64, 32);
  net->to(at::kHalf);
  const auto sgd = torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(0.01);
  std::vector<at::Tensor> copy;  // float32, stepped by LibTorch
  for (const auto& p : net->parameters()) copy.push_back(p.detach().to(at::kFloat));
  torch::optim::SGD reference(copy, sgd);
  auto model = acc.prepare(net);
  torch::optim::SGD inner(net->parameters(), sgd);
  auto& opt = acc.prepare(inner);
  const auto params = net->parameters();
  for (int step = 0; step < 12; ++step) {
    torch::manual_seed(100 + step);
    const at::Tensor x = at::randn({16, 64}).to(at::kHalf);
    at::Tensor loss = model(x).to(at::kFloat).pow(2).mean();
    const bool overflow = step == 0 || step == 5;  // the loss scaled past float16's range
    if (overflow) loss = loss * 1e6;
    acc.backward(loss);
    const double scale = acc.scaler()->get_scale();
    std::vector<at::Tensor> before;
    for (const auto& p : params) before.push_back(weights_of(inner, p).clone());
    acc.scaler()->unscale_(inner);  // what opt.step() would do first; the gradients are now true
    for (size_t i = 0; i < params.size(); ++i) copy[i].mutable_grad() = params[i].grad().to(at::kFloat);
    opt.step();
    opt.zero_grad();
    if (overflow) {
      EXPECT_TRUE(acc.scaler()->last_step_skipped());
      EXPECT_EQ(acc.scaler()->get_scale(), scale * 0.5);
      for (size_t i = 0; i < params.size(); ++i)
        EXPECT_TRUE(weights_of(inner, params[i]).equal(before[i])) << "parameter " << i << ": stepped on inf";
      if (step == 0) EXPECT_TRUE(inner.state().empty()) << "state (or masters) made on a skipped first step";
      continue;
    }
    EXPECT_FALSE(acc.scaler()->last_step_skipped()) << "step " << step;
    reference.step();
    for (size_t i = 0; i < params.size(); ++i) {
      const at::Tensor master = weights_of(inner, params[i]);
      EXPECT_EQ(master.scalar_type(), at::kFloat);
      EXPECT_TRUE(master.equal(copy[i])) << "step " << step << ", parameter " << i << ": the master is not LibTorch's float32 step";
      EXPECT_TRUE(params[i].equal(master.to(at::kHalf))) << "step " << step << ", parameter " << i << ": not its master rounded";
      EXPECT_FALSE(params[i].equal(before[i].to(at::kHalf))) << "step " << step << ", parameter " << i << ": not stepped";
    }
  }
  EXPECT_EQ(acc.scaler()->skipped_steps(), 2);
}

}  // namespace fused_step_test

namespace fused_step_test {

// The fused optimizer alone, `steps` steps from make_params() in `type`: every parameter, its
// float32 weights (the master of a 16-bit one) and its state, in order.
std::vector<at::Tensor> fused_only(const Case& c, int steps, at::ScalarType type) {
  const auto params = type == at::kFloat ? make_params() : converted(make_params(), type);
  auto o = c.make(groups_of(c, params));
  for (int step = 0; step < steps; ++step) {
    set_grads(params, step, type);
    set_lr(*o, step);
    xlaunch::optim::fused_step(*o);
  }
  std::vector<at::Tensor> out;
  for (const auto& g : params)
    for (const auto& p : g) {
      out.push_back(p.clone());
      out.push_back(weights_of(*o, p).clone());
      for (const at::Tensor& t : state_tensors(*o, p))
        if (t.defined()) out.push_back(t.clone());
    }
  return out;
}

// Each loop is compiled for AVX-512, AVX2 with FMA and the baseline (a CPU without AVX2 runs the
// last), with the same operations in the same order, so each set steps to the same bits: every
// case and parameter type, 200 steps, every parameter, master and state tensor equal under each
// set this CPU has to those of its best (which the other tests compare with LibTorch's step).
TEST(FusedStep, EveryInstructionSetTheCpuHasStepsToTheSameBits) {
  namespace kernels = xlaunch::optim::kernels;
  const std::string best = kernels::vector_isa();
  const int best_level = best == "avx512" ? 2 : best == "avx2" ? 1 : 0;
  for (const at::ScalarType type : {at::kFloat, at::kBFloat16, at::kHalf})
    for (const Case& c : cases()) {
      const auto want = fused_only(c, 200, type);
      for (int level = best_level - 1; level >= 0; --level) {
        const int before = kernels::cap_vector_isa(level);
        const std::string isa = kernels::vector_isa();
        const auto got = fused_only(c, 200, type);
        kernels::cap_vector_isa(before);
        EXPECT_EQ(isa, level == 1 ? "avx2" : "baseline");
        ASSERT_EQ(got.size(), want.size()) << c.name;
        for (size_t i = 0; i < got.size(); ++i)
          EXPECT_TRUE(got[i].equal(want[i])) << c.name << " " << c10::toString(type) << " tensor " << i << ": " << isa
                                             << " against " << best << ", " << max_ulps(got[i].to(at::kFloat), want[i].to(at::kFloat)) << " ulps";
      }
    }
  std::printf("fused_step instruction sets compared with %s: %d\n", best.c_str(), best_level);
}

}  // namespace fused_step_test

namespace fused_step_test {

std::string saved_bytes(Optimizer& o) {
  torch::serialize::OutputArchive out;
  o.save(out);
  std::ostringstream os;
  out.save_to(os);
  return os.str();
}

size_t masters_restored(Optimizer& o, const std::string& bytes) {
  torch::serialize::InputArchive in;
  std::istringstream is(bytes);
  in.load_from(is);
  o.load(in);
  return xlaunch::optim::restore_masters(o, in);
}

// A 16-bit parameter made float32 since its master was made (model->to(kFloat) keeps the tensor,
// which keeps its state) steps as the float32 parameter it now is, and its stale master is
// released: the next checkpoint carries none, and a checkpoint that has one gives none to a float32
// parameter.
TEST(FusedStep, AParameterMadeFloat32DropsItsMaster) {
  torch::manual_seed(4);
  at::Tensor p = at::randn({1000}).to(at::kBFloat16);
  torch::optim::SGD fused({p}, SGDOptions(1e-3).momentum(0.9));
  for (int step = 0; step < 3; ++step) {
    p.mutable_grad() = at::randn({1000}).to(at::kBFloat16);
    xlaunch::optim::fused_step(fused);
  }
  const std::string with_master = saved_bytes(fused);
  ASSERT_NE(xlaunch::optim::master_of(*fused.state().begin()->second), nullptr);
  ASSERT_TRUE(xlaunch::optim::master_of(*fused.state().begin()->second)->defined());
  {
    at::NoGradGuard no_grad;
    p.set_data(p.to(at::kFloat));  // as Module::to does
  }
  const at::Tensor before = p.clone();
  at::Tensor ref = p.clone();
  const at::Tensor buf = static_cast<torch::optim::SGDParamState&>(*fused.state().begin()->second).momentum_buffer().clone();
  p.mutable_grad() = at::randn({1000});
  xlaunch::optim::fused_step(fused);
  // LibTorch's momentum step on the float32 parameter, from the same buffer.
  const at::Tensor b = buf * 0.9 + p.grad();
  ref.add_(b, -1e-3);
  EXPECT_TRUE(p.equal(ref)) << (p - ref).abs().max().item<float>();
  EXPECT_FALSE(p.equal(before));
  const at::Tensor* master = xlaunch::optim::master_of(*fused.state().begin()->second);
  EXPECT_TRUE(master == nullptr || !master->defined()) << "the float32 parameter kept its master";

  const std::string without = saved_bytes(fused);
  at::Tensor q = at::zeros({1000}, at::kBFloat16);
  torch::optim::SGD sixteen({q}, SGDOptions(1e-3).momentum(0.9));
  EXPECT_EQ(masters_restored(sixteen, with_master), 1u);
  EXPECT_EQ(masters_restored(sixteen, without), 0u) << "a released master was saved";
  at::Tensor r = at::zeros({1000});
  torch::optim::SGD float32({r}, SGDOptions(1e-3).momentum(0.9));
  EXPECT_EQ(masters_restored(float32, with_master), 0u) << "a float32 parameter was given a master";
}

}  // namespace fused_step_test
