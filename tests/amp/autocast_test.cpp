// The mixed-precision setting, AutocastGuard on the CPU, and a short bf16 training run of the
// benchmark MLP (784-H-H-10) against the same run in float32.
#include <gtest/gtest.h>

#include <ATen/ops/cross_entropy_loss.h>
#include <ATen/ops/randn.h>
#include <torch/cuda.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include <cstdlib>

#include "bench_model.h"
#include "xlaunch/autocast.h"
#include "xlaunch/error.h"
#include "xlaunch/grad_scaler.h"
#include "xlaunch/mixed_precision.h"

namespace {

using xlaunch::AutocastGuard;
using xlaunch::MixedPrecision;

TEST(MixedPrecision, ParsesTheThreeSettings) {
  EXPECT_EQ(xlaunch::parse_mixed_precision("no"), MixedPrecision::No);
  EXPECT_EQ(xlaunch::parse_mixed_precision("fp16"), MixedPrecision::Fp16);
  EXPECT_EQ(xlaunch::parse_mixed_precision(" BF16 "), MixedPrecision::Bf16);
  EXPECT_STREQ(xlaunch::to_string(MixedPrecision::Bf16), "bf16");
  EXPECT_TRUE(xlaunch::needs_grad_scaler(MixedPrecision::Fp16));
  EXPECT_FALSE(xlaunch::needs_grad_scaler(MixedPrecision::Bf16));
  try {
    xlaunch::parse_mixed_precision("float16", "XLAUNCH_MIXED_PRECISION");
    FAIL() << "float16 was accepted";
  } catch (const xlaunch::UsageError& e) {
    EXPECT_STREQ(e.what(), "XLAUNCH_MIXED_PRECISION='float16' is not a mixed precision xlaunch knows: use one of no, fp16, bf16");
  }
  ::setenv("XLAUNCH_MIXED_PRECISION", "bf16", 1);
  EXPECT_EQ(xlaunch::mixed_precision_from_env(), MixedPrecision::Bf16);
  ::unsetenv("XLAUNCH_MIXED_PRECISION");
  EXPECT_EQ(xlaunch::mixed_precision_from_env(), MixedPrecision::No);
}

TEST(AutocastGuard, LinearIsBFloat16InsideAndFloat32Outside) {
  torch::nn::Linear lin(16, 8);
  const at::Tensor x = at::randn({4, 16});
  EXPECT_EQ(lin(x).scalar_type(), at::kFloat);
  {
    AutocastGuard guard(c10::DeviceType::CPU, MixedPrecision::Bf16);
    EXPECT_TRUE(guard.active());
    EXPECT_EQ(lin(x).scalar_type(), at::kBFloat16);
    EXPECT_EQ(lin->weight.scalar_type(), at::kFloat) << "parameters stay float32";
    {
      AutocastGuard off(c10::DeviceType::CPU, MixedPrecision::No);  // "no" changes nothing
      EXPECT_FALSE(off.active());
      EXPECT_EQ(lin(x).scalar_type(), at::kBFloat16);
    }
    EXPECT_EQ(lin(x).scalar_type(), at::kBFloat16);
  }
  EXPECT_EQ(lin(x).scalar_type(), at::kFloat);
  EXPECT_FALSE(xlaunch::autocast_enabled(c10::DeviceType::CPU));
}

TEST(AutocastGuard, Float16OnTheCpuWorksOrIsRefusedClearly) {
  torch::nn::Linear lin(16, 8);
  const at::Tensor x = at::randn({4, 16});
  const std::string why = xlaunch::autocast_unsupported_reason(c10::DeviceType::CPU, at::kHalf);
  if (why.empty()) {
    AutocastGuard guard(c10::DeviceType::CPU, MixedPrecision::Fp16);
    EXPECT_EQ(lin(x).scalar_type(), at::kHalf);
  } else {
    EXPECT_NE(why.find("use mixed_precision: bf16"), std::string::npos) << why;
    EXPECT_THROW(AutocastGuard(c10::DeviceType::CPU, MixedPrecision::Fp16), xlaunch::UsageError);
  }
  EXPECT_EQ(lin(x).scalar_type(), at::kFloat);
}

TEST(AutocastGuard, RefusesWhatItCannotDo) {
  EXPECT_THROW(AutocastGuard(c10::DeviceType::CPU, at::kFloat), xlaunch::UsageError);
  EXPECT_THROW(AutocastGuard(c10::DeviceType::Meta, at::kBFloat16), xlaunch::UsageError);
  EXPECT_TRUE(xlaunch::autocast_unsupported_reason(c10::DeviceType::CUDA, at::kHalf).empty());
  EXPECT_EQ(xlaunch::autocast_dtype(MixedPrecision::Fp16), at::kHalf);
  EXPECT_EQ(xlaunch::autocast_dtype(MixedPrecision::No), at::ScalarType::Undefined);
}

// Mean loss over the last 20 of 150 SGD steps on a learnable synthetic task (labels from a fixed
// random linear teacher), with the same initial weights and batches for every precision. fp16
// steps through a GradScaler, as the Accelerator does.
double train(MixedPrecision mp, double* first_loss, c10::Device device = c10::Device(c10::kCPU)) {
  torch::manual_seed(7);
  const at::Tensor teacher = at::randn({784, 10});
  const at::Tensor inputs = at::randn({1024, 784}).to(device);
  const at::Tensor labels = inputs.mm(teacher.to(device)).argmax(1);
  xlaunch::bench::MlpImpl model(64);
  model.to(device);
  torch::optim::SGD opt(model.parameters(), torch::optim::SGDOptions(0.02).momentum(0.9));
  xlaunch::GradScalerOptions so;
  so.enabled = xlaunch::needs_grad_scaler(mp);
  xlaunch::GradScaler scaler(so);
  double tail = 0;
  for (int step = 0; step < 150; ++step) {
    const int64_t b = (step * 64) % 1024;
    at::Tensor loss;
    {
      AutocastGuard guard(device.type(), mp);
      loss = at::cross_entropy_loss(model.forward(inputs.slice(0, b, b + 64)), labels.slice(0, b, b + 64));
    }
    opt.zero_grad();
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    const double l = loss.item<double>();
    if (step == 0) *first_loss = l;
    if (step >= 130) tail += l / 20;
  }
  return tail;
}

TEST(AutocastTraining, BFloat16MlpReachesTheFloat32Loss) {
  double first32 = 0, first16 = 0;
  const double fp32 = train(MixedPrecision::No, &first32);
  const double bf16 = train(MixedPrecision::Bf16, &first16);
  std::printf("loss at step 0: fp32 %.7f bf16 %.7f; mean of steps 130-149: fp32 %.7f bf16 %.7f\n", first32,
              first16, fp32, bf16);
  EXPECT_LT(fp32, 0.5 * first32) << "the float32 run must learn, or the comparison means nothing";
  EXPECT_NEAR(bf16, fp32, 0.05 + 0.15 * fp32);
}

TEST(AutocastTraining, CudaFloat16WithGradScalerAndBFloat16ReachTheFloat32Loss) {
  if (!torch::cuda::is_available())
    GTEST_SKIP() << "no CUDA device (torch::cuda::is_available() is false): CUDA autocast cannot run here";
  const c10::Device cuda(c10::kCUDA, 0);
  {
    torch::nn::Linear lin(16, 8);
    lin->to(cuda);
    const at::Tensor x = at::randn({4, 16}).to(cuda);
    AutocastGuard guard(c10::DeviceType::CUDA, MixedPrecision::Fp16);
    EXPECT_EQ(lin(x).scalar_type(), at::kHalf);
  }
  double f32 = 0, f16 = 0, fb16 = 0;
  const double fp32 = train(MixedPrecision::No, &f32, cuda);
  const double fp16 = train(MixedPrecision::Fp16, &f16, cuda);
  const double bf16 = train(MixedPrecision::Bf16, &fb16, cuda);
  std::printf("cuda mean loss of steps 130-149: fp32 %.5f fp16 %.5f bf16 %.5f\n", fp32, fp16, bf16);
  EXPECT_LT(fp32, 0.5 * f32);
  EXPECT_NEAR(fp16, fp32, 0.05 + 0.15 * fp32);
  EXPECT_NEAR(bf16, fp32, 0.05 + 0.15 * fp32);
}

}  // namespace
