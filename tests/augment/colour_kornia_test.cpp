// xlaunch's ColorJitter and Normalize against Kornia 0.9's on the same batches with the same
// parameters (recorded by colour_kornia.py; colour_kornia_test.sh runs both): every output within
// 1e-4 of Kornia's, for both implementations of ColorJitter (the fused CPU loop that apply() picks
// on the CPU, and the batched ATen steps that run on other devices). The largest difference of each
// case is printed.
//
// usage: colour_kornia_test --cases CASES.json [gtest flags]
#include <gtest/gtest.h>

#include <ATen/ops/abs.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "augment/colour_kernels.h"
#include "xlaunch/augment.h"

namespace xlaunch::augment {
namespace {

std::string g_cases_path;
constexpr double kTolerance = 1e-4;

const nlohmann::json& recorded() {
  static const nlohmann::json j = [] {
    std::ifstream in(g_cases_path);
    if (!in) {
      throw std::runtime_error("cannot read the cases '" + g_cases_path +
                               "': run colour_kornia_test.sh (ctest -R colour_kornia_test), which records them "
                               "with colour_kornia.py");
    }
    return nlohmann::json::parse(in);
  }();
  return j;
}

at::Tensor tensor_of(const nlohmann::json& values, const nlohmann::json& shape, at::ScalarType dtype) {
  return at::tensor(values.get<std::vector<double>>(), at::kDouble).view(shape.get<std::vector<int64_t>>()).to(dtype);
}

double max_diff(const at::Tensor& ours, const at::Tensor& kornia) {
  EXPECT_EQ(ours.sizes(), kornia.sizes());
  EXPECT_EQ(ours.scalar_type(), kornia.scalar_type());
  return (ours.to(at::kDouble) - kornia.to(at::kDouble)).abs().max().item<double>();
}

TEST(ColourKornia, ColorJitterMatchesKorniaOnBothPaths) {
  const auto& all = recorded().at("color_jitter");
  ASSERT_GE(all.size(), 10u);
  // The ranges only decide whether a 1-channel image is refused; the parameters are the cases'.
  const auto rgb = make("ColorJitter", {{"brightness", {0.4}}, {"contrast", {0.4}}, {"saturation", {0.4}}, {"hue", {0.1}}});
  const auto gray = make("ColorJitter", {{"brightness", {0.4}}, {"contrast", {0.4}}});
  for (const auto& c : all) {
    const std::string name = c.at("name");
    const at::ScalarType dtype = c.at("dtype") == "float64" ? at::kDouble : at::kFloat;
    const at::Tensor images = tensor_of(c.at("input"), c.at("shape"), dtype);
    const at::Tensor expected = tensor_of(c.at("output"), c.at("shape"), dtype);
    const auto& rows = c.at("values");
    const int64_t n = static_cast<int64_t>(rows.size());
    Params params{at::empty({n, 8}, at::kDouble), at::empty({n}, at::kBool)};
    for (int64_t i = 0; i < n; ++i) {
      for (int k = 0; k < 8; ++k) params.values.data_ptr<double>()[i * 8 + k] = rows[i][k].get<double>();
      params.applied.data_ptr<bool>()[i] = c.at("applied")[i].get<bool>();
    }
    const Transform& jitter = images.size(1) == 1 ? *gray : *rgb;
    ASSERT_TRUE(detail::color_jitter_fusable(images)) << name;
    const double fused = max_diff(jitter.apply(images, params), expected);
    const double aten = max_diff(detail::color_jitter_aten(images, params), expected);
    std::printf("ColorJitter %-26s max |xlaunch - kornia|: fused %.3g, aten %.3g\n", name.c_str(), fused, aten);
    EXPECT_LE(fused, kTolerance) << name << " (fused CPU loop)";
    EXPECT_LE(aten, kTolerance) << name << " (batched ATen steps)";
    // Rows not applied are the input itself, unclamped.
    for (int64_t i = 0; i < images.size(0); ++i) {
      if (!params.applied[i].item<bool>()) {
        EXPECT_TRUE(jitter.apply(images, params)[i].equal(images[i])) << name << " row " << i;
      }
    }
  }
}

TEST(ColourKornia, NormalizeMatchesKornia) {
  const auto& all = recorded().at("normalize");
  ASSERT_GE(all.size(), 4u);
  for (const auto& c : all) {
    const std::string name = c.at("name");
    const at::Tensor images = tensor_of(c.at("input"), c.at("shape"), at::kFloat);
    const at::Tensor expected = tensor_of(c.at("output"), c.at("shape"), at::kFloat);
    const auto normalize = make("Normalize", {{"mean", c.at("mean").get<std::vector<double>>()},
                                              {"std", c.at("std").get<std::vector<double>>()}});
    const Params params = normalize->draw(BatchKey{1, 0, std::vector<int64_t>(images.size(0), 0)}, 0, 1, 1);
    const double d = max_diff(normalize->apply(images, params), expected);
    std::printf("Normalize   %-26s max |xlaunch - kornia|: %.3g\n", name.c_str(), d);
    EXPECT_LE(d, kTolerance) << name;
  }
}

}  // namespace
}  // namespace xlaunch::augment

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--cases") xlaunch::augment::g_cases_path = argv[i + 1];
  }
  if (xlaunch::augment::g_cases_path.empty()) {
    std::fprintf(stderr, "usage: colour_kornia_test --cases CASES.json (colour_kornia_test.sh records them)\n");
    return 2;
  }
  return RUN_ALL_TESTS();
}
