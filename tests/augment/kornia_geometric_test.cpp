// xlaunch's geometric transforms against Kornia 0.9 (kornia_geometric.py records, and
// kornia_geometric_test.sh runs both): for each case, Kornia's own parameters (translated to our
// columns) are applied with Transform::apply to Kornia's input, and the output must equal Kornia's
// within 1e-4 (max abs), on both warp paths (the CPU kernel and the grid path every other device
// takes). The largest differences are printed; Kornia computes its grid in float32, so at 224
// pixels they reach ~5e-5.
//
// usage: kornia_geometric_test --cases DIR [gtest flags]
#include <gtest/gtest.h>

#include <ATen/TensorOperators.h>
#include <ATen/ops/abs.h>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "augment/warp.h"
#include "xlaunch/augment.h"
#include "xlaunch/safetensors.h"

namespace xlaunch::augment {
namespace {

std::string g_dir;
constexpr double kTolerance = 1e-4;

const nlohmann::json& cases() {
  static const nlohmann::json c = [] {
    std::ifstream in(g_dir + "/cases.json");
    if (!in) {
      throw std::runtime_error("cannot read '" + g_dir + "/cases.json': run kornia_geometric_test.sh " +
                               "(ctest -R kornia_geometric_test), which records it with kornia_geometric.py");
    }
    return nlohmann::json::parse(in);
  }();
  return c;
}

at::Tensor get(const NamedTensors& tensors, const std::string& name) {
  for (const auto& [n, t] : tensors) {
    if (n == name) return t;
  }
  throw std::runtime_error("the recording has no tensor '" + name + "'");
}

Args args_of(const nlohmann::json& j) {
  Args args;
  for (const auto& [k, v] : j.items()) args[k] = v.get<std::vector<double>>();
  return args;
}

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  if (a.sizes() != b.sizes()) return HUGE_VAL;
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

// Every case once per warp path.
class KorniaGeometric : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { detail::force_grid_path = GetParam(); }
  void TearDown() override { detail::force_grid_path = false; }
};

TEST_P(KorniaGeometric, EachTransformWithKorniasParameters) {
  int checked = 0;
  for (const auto& c : cases().at("cases")) {
    if (c.at("name") == "AugmentationSequential") continue;
    const std::string name = c.at("name");
    const NamedTensors t = load_safetensors(g_dir + "/" + c.at("file").get<std::string>());
    const std::shared_ptr<Transform> transform = make(name, args_of(c.at("args")));
    const at::Tensor out = transform->apply(get(t, "input"), Params{get(t, "values"), get(t, "applied")});
    const double d = max_diff(out, get(t, "output"));
    std::printf("  %-28s %-22s max |xlaunch - kornia| = %.3g\n", c.at("case").get<std::string>().c_str(),
                name.c_str(), d);
    EXPECT_LE(d, kTolerance) << c.at("case");
    ++checked;
  }
  EXPECT_GE(checked, 14);
}

TEST_P(KorniaGeometric, AugmentationSequentialWithKorniasParameters) {
  for (const auto& c : cases().at("cases")) {
    if (c.at("name") != "AugmentationSequential") continue;
    const NamedTensors t = load_safetensors(g_dir + "/" + c.at("file").get<std::string>());
    at::Tensor x = get(t, "input");
    int i = 0;
    for (const auto& step : c.at("steps")) {
      const auto transform = make(step.at("name"), args_of(step.at("args")));
      const std::string n = std::to_string(i++);
      x = transform->apply(x, Params{get(t, "values_" + n), get(t, "applied_" + n)});
    }
    const double d = max_diff(x, get(t, "output"));
    std::printf("  sequence of %d: max |xlaunch - kornia| = %.3g\n", i, d);
    EXPECT_LE(d, kTolerance);
    return;
  }
  FAIL() << "the recording has no AugmentationSequential case";
}

INSTANTIATE_TEST_SUITE_P(Paths, KorniaGeometric, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "GridPath" : "CpuKernel"; });

}  // namespace
}  // namespace xlaunch::augment

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--cases") xlaunch::augment::g_dir = argv[i + 1];
  }
  if (xlaunch::augment::g_dir.empty()) {
    std::fprintf(stderr, "usage: kornia_geometric_test --cases DIR (kornia_geometric_test.sh records DIR)\n");
    return 2;
  }
  return RUN_ALL_TESTS();
}
