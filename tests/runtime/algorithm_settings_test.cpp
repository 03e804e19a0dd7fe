// cudnn_benchmark and deterministic (runtime/src/algorithms/algorithms.h): read from the XLAUNCH_*
// variables, applied by the Accelerator's constructor to LibTorch's context (read back here), and
// an operation without a deterministic implementation refused with one message that names it and
// the fix. On the CPU, put_ without accumulate is such an operation (PyTorch 2.11). Every test
// leaves LibTorch's flags and the environment as it found them.
#include <gtest/gtest.h>

#include <ATen/Context.h>
#include <torch/torch.h>

#include <cstdlib>
#include <functional>
#include <utility>
#include <vector>
#include <optional>
#include <string>

#include "algorithms/algorithms.h"
#include "xlaunch/accelerator.h"
#include "xlaunch/error.h"

namespace {

// Saves what the tests change and puts it back.
class AlgorithmSettings : public ::testing::Test {
 protected:
  void SetUp() override {
    at::Context& ctx = at::globalContext();
    benchmark_ = ctx.benchmarkCuDNN();
    cudnn_deterministic_ = ctx.deterministicCuDNN();
    deterministic_ = ctx.deterministicAlgorithms();
    warn_only_ = ctx.deterministicAlgorithmsWarnOnly();
    for (const char* v : {"XLAUNCH_CUDNN_BENCHMARK", "XLAUNCH_DETERMINISTIC", "CUBLAS_WORKSPACE_CONFIG"})
      if (const char* s = std::getenv(v)) saved_env_.emplace_back(v, s);
    unsetenv("XLAUNCH_CUDNN_BENCHMARK");
    unsetenv("XLAUNCH_DETERMINISTIC");
    unsetenv("CUBLAS_WORKSPACE_CONFIG");
    ctx.setBenchmarkCuDNN(false);  // LibTorch's defaults
    ctx.setDeterministicCuDNN(false);
    ctx.setDeterministicAlgorithms(false, false);
  }
  void TearDown() override {
    at::Context& ctx = at::globalContext();
    ctx.setBenchmarkCuDNN(benchmark_);
    ctx.setDeterministicCuDNN(cudnn_deterministic_);
    ctx.setDeterministicAlgorithms(deterministic_, warn_only_);
    unsetenv("XLAUNCH_CUDNN_BENCHMARK");
    unsetenv("XLAUNCH_DETERMINISTIC");
    unsetenv("CUBLAS_WORKSPACE_CONFIG");
    for (const auto& [name, value] : saved_env_) setenv(name.c_str(), value.c_str(), 1);
  }

 private:
  bool benchmark_ = false, cudnn_deterministic_ = false, deterministic_ = false, warn_only_ = false;
  std::vector<std::pair<std::string, std::string>> saved_env_;
};

xlaunch::AcceleratorOptions cpu_options() {
  xlaunch::AcceleratorOptions o = xlaunch::AcceleratorOptions::from_env();
  o.cpu = true;
  return o;
}

// A layer whose forward writes with put_ (no deterministic implementation on the CPU).
struct PutNet : torch::nn::Module {
  torch::nn::Linear fc{register_module("fc", torch::nn::Linear(4, 4))};
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor y = fc(x).flatten();
    return y.clone().put_(torch::zeros({2}, torch::kLong), y.narrow(0, 0, 2));
  }
};

// Backward runs put_: the refusal comes from inside acc.backward.
struct PutInBackward : torch::autograd::Function<PutInBackward> {
  static at::Tensor forward(torch::autograd::AutogradContext*, const at::Tensor& x) { return x.clone(); }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*, torch::autograd::variable_list g) {
    return {g[0].clone().put_(torch::zeros({2}, torch::kLong), torch::ones({2}))};
  }
};

std::optional<std::string> usage_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const xlaunch::UsageError& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

}  // namespace

TEST_F(AlgorithmSettings, ReadFromTheEnvironmentAndAppliedByTheAccelerator) {
  setenv("XLAUNCH_DETERMINISTIC", "1", 1);
  xlaunch::AcceleratorOptions o = cpu_options();
  EXPECT_TRUE(o.deterministic);
  EXPECT_FALSE(o.cudnn_benchmark);
  xlaunch::Accelerator acc(o);
  at::Context& ctx = at::globalContext();
  EXPECT_TRUE(ctx.deterministicAlgorithms());
  EXPECT_FALSE(ctx.deterministicAlgorithmsWarnOnly()) << "refused, not warned about";
  EXPECT_TRUE(ctx.deterministicCuDNN());
  EXPECT_FALSE(ctx.benchmarkCuDNN());
  ASSERT_NE(std::getenv("CUBLAS_WORKSPACE_CONFIG"), nullptr);
  EXPECT_STREQ(std::getenv("CUBLAS_WORKSPACE_CONFIG"), ":4096:8");

  unsetenv("XLAUNCH_DETERMINISTIC");
  setenv("XLAUNCH_CUDNN_BENCHMARK", "1", 1);
  o = cpu_options();
  EXPECT_TRUE(o.cudnn_benchmark);
  ctx.setDeterministicAlgorithms(false, false);
  ctx.setDeterministicCuDNN(false);
  xlaunch::Accelerator fast(o);
  EXPECT_TRUE(ctx.benchmarkCuDNN());
  EXPECT_FALSE(ctx.deterministicAlgorithms());
  EXPECT_FALSE(ctx.deterministicCuDNN());
}

TEST_F(AlgorithmSettings, SettingsLeftOffKeepWhatTheProgramSet) {
  at::Context& ctx = at::globalContext();
  ctx.setDeterministicAlgorithms(true, /*warn_only=*/true);
  ctx.setBenchmarkCuDNN(true);
  xlaunch::Accelerator acc(cpu_options());
  EXPECT_TRUE(ctx.deterministicAlgorithms());
  EXPECT_TRUE(ctx.deterministicAlgorithmsWarnOnly());
  EXPECT_TRUE(ctx.benchmarkCuDNN());
}

TEST_F(AlgorithmSettings, BothOnOrAForeignCublasWorkspaceAreRefused) {
  xlaunch::AcceleratorOptions o = cpu_options();
  o.cudnn_benchmark = o.deterministic = true;
  const auto both = usage_error_of([&] { xlaunch::Accelerator acc(o); });
  ASSERT_TRUE(both.has_value());
  EXPECT_NE(both->find("cudnn_benchmark: false"), std::string::npos) << *both;

  o.cudnn_benchmark = false;
  setenv("CUBLAS_WORKSPACE_CONFIG", ":0:0", 1);
  const auto foreign = usage_error_of([&] { xlaunch::Accelerator acc(o); });
  ASSERT_TRUE(foreign.has_value());
  EXPECT_NE(foreign->find("CUBLAS_WORKSPACE_CONFIG=':0:0'"), std::string::npos) << *foreign;
  setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8", 1);
  EXPECT_NO_THROW(xlaunch::Accelerator acc(o));
  EXPECT_STREQ(std::getenv("CUBLAS_WORKSPACE_CONFIG"), ":16:8") << "a deterministic value is kept";
}

TEST_F(AlgorithmSettings, TheOperationPyTorchRefusesIsNamed) {
  EXPECT_EQ(xlaunch::algorithms::refused_operation(
                "put_ does not have a deterministic implementation, but you set "
                "'torch.use_deterministic_algorithms(True)'. You can turn off determinism just for this operation"),
            "put_");
  EXPECT_EQ(xlaunch::algorithms::refused_operation("in backward:\nindex_add_cuda_ does not have a deterministic "
                                                 "implementation, but you set ..."),
            "index_add_cuda_");
  EXPECT_EQ(xlaunch::algorithms::refused_operation("shape mismatch"), "");
}

TEST_F(AlgorithmSettings, ARefusedOperationInForwardOrBackwardGetsOneMessageWithTheFix) {
  xlaunch::AcceleratorOptions o = cpu_options();
  o.deterministic = true;
  xlaunch::Accelerator acc(o);
  auto model = acc.prepare(std::make_shared<PutNet>());
  const at::Tensor x = torch::ones({2, 4});
  const auto forward = usage_error_of([&] { model(x); });
  ASSERT_TRUE(forward.has_value()) << "put_ ran under deterministic algorithms without a refusal";
  EXPECT_NE(forward->find("the forward of a prepared model ran put_, which has no deterministic implementation"),
            std::string::npos)
      << *forward;
  EXPECT_NE(forward->find("Set deterministic: false"), std::string::npos) << *forward;
  EXPECT_NE(forward->find("use_deterministic_algorithms.html"), std::string::npos) << *forward;

  const at::Tensor loss = PutInBackward::apply(model->fc(x)).sum();
  const auto backward = usage_error_of([&] { acc.backward(loss); });
  ASSERT_TRUE(backward.has_value());
  EXPECT_NE(backward->find("acc.backward ran put_"), std::string::npos) << *backward;

  // Other errors of the forward pass unchanged.
  EXPECT_THROW(model(torch::ones({2, 3})), c10::Error);
}

TEST_F(AlgorithmSettings, WithoutDeterministicTheSameForwardRuns) {
  xlaunch::Accelerator acc(cpu_options());
  auto model = acc.prepare(std::make_shared<PutNet>());
  EXPECT_NO_THROW(model(torch::ones({2, 4})));
  EXPECT_FALSE(at::globalContext().deterministicAlgorithms());
}
