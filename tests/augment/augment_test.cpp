// The augmentation core and the geometric transforms without Kornia: the draw protocol (keyed by
// sample, not by batch position; p and same_on_batch), the registry's messages, identities that
// know their answer, rows not applied left bitwise alone, and the CPU kernel against the grid path.
// Sequential's runs of transforms: augment_sequential_test.cpp.
#include <gtest/gtest.h>

#include <ATen/TensorOperators.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/rand.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>

#include <array>
#include <cmath>
#include <limits>

#include "augment/rows.h"
#include "augment/warp.h"
#include "xlaunch/augment.h"
#include "augment_samples.h"
#include "usage_error.h"

namespace xlaunch::augment {
namespace {

TEST(SampleSeed, IsThePureChainOfMixSeed) {
  EXPECT_EQ(sample_seed(7, 2, 11, 3), mix_seed(mix_seed(mix_seed(7, 2), 11), 3));
  EXPECT_NE(sample_seed(7, 2, 11, 3), sample_seed(7, 2, 11, 4));
  EXPECT_NE(sample_seed(7, 2, 11, 3), sample_seed(7, 3, 11, 3));
  EXPECT_NE(sample_seed(7, 2, 11, 3), sample_seed(8, 2, 11, 3));
}

TEST(Draw, ASamplesParametersDoNotDependOnItsBatch) {
  const auto t = affine(0.5);
  const Params a = t->draw(BatchKey{5, 1, {10, 11, 12, 13}}, 0, 32, 32);
  const Params b = t->draw(BatchKey{5, 1, {12, 99, 10}}, 0, 32, 32);
  EXPECT_TRUE(at::equal(a.values[2], b.values[0]));
  EXPECT_TRUE(at::equal(a.values[0], b.values[2]));
  EXPECT_EQ(a.applied[2].item<bool>(), b.applied[0].item<bool>());
  // Another epoch, seed or position: other draws.
  EXPECT_FALSE(at::equal(a.values, t->draw(BatchKey{5, 2, {10, 11, 12, 13}}, 0, 32, 32).values));
  EXPECT_FALSE(at::equal(a.values, t->draw(BatchKey{6, 1, {10, 11, 12, 13}}, 0, 32, 32).values));
  EXPECT_FALSE(at::equal(a.values, t->draw(BatchKey{5, 1, {10, 11, 12, 13}}, 1, 32, 32).values));
}

TEST(Draw, ValuesLieInTheirRangesAndPDoesNotShiftThem) {
  BatchKey key{3, 0, {}};
  for (int64_t i = 0; i < 2000; ++i) key.ids.push_back(i);
  const Params all = affine(1.0)->draw(key, 0, 20, 40);
  const Params none = affine(0.0)->draw(key, 0, 20, 40);
  const Params half = affine(0.5)->draw(key, 0, 20, 40);
  EXPECT_TRUE(at::equal(all.values, none.values));
  EXPECT_TRUE(at::equal(all.values, half.values));
  EXPECT_TRUE(all.applied.all().item<bool>());
  EXPECT_FALSE(none.applied.any().item<bool>());
  const int64_t applied = half.applied.sum().item<int64_t>();
  EXPECT_GT(applied, 900);
  EXPECT_LT(applied, 1100);
  const at::Tensor v = all.values;
  const auto within = [&](int col, double lo, double hi) {
    EXPECT_GE(v.select(1, col).min().item<double>(), lo) << col;
    EXPECT_LT(v.select(1, col).max().item<double>(), hi) << col;
    EXPECT_GT(v.select(1, col).max().item<double>() - v.select(1, col).min().item<double>(), 0.9 * (hi - lo)) << col;
  };
  within(0, -30, 30);
  within(1, -4, 4);  // 0.1 x width 40
  within(2, -4, 4);  // 0.2 x height 20
  within(3, 0.8, 1.2);
  within(5, -10, 10);
  within(6, -5, 5);
  EXPECT_TRUE(at::equal(v.select(1, 3), v.select(1, 4)));  // one scale for both axes
}

TEST(Draw, SameOnBatchRepeatsTheFirstRowsDraw) {
  const auto t = make("RandomPerspective", {{"same_on_batch", {1}}, {"p", {0.5}}});
  const Params p = t->draw(BatchKey{1, 0, {4, 5, 6}}, 2, 16, 16);
  const Params first = t->draw(BatchKey{1, 0, {4}}, 2, 16, 16);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(at::equal(p.values[i], first.values[0]));
    EXPECT_EQ(p.applied[i].item<bool>(), first.applied[0].item<bool>());
  }
}

TEST(Registry, ListsTheGeometricTransforms) {
  const std::vector<std::string> names = registered();
  for (const char* n : {"RandomAffine", "RandomPerspective", "RandomResizedCrop", "RandomHorizontalFlip"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  }
}

TEST(Registry, MistakesNameTheTransformTheArgumentAndTheAllowedRange) {
  const std::string unknown = xlaunch::test::usage_error_of([] { make("RandomRotate90"); });
  EXPECT_NE(unknown.find("'RandomRotate90'"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("RandomAffine"), std::string::npos) << unknown;
  const std::string arg = xlaunch::test::usage_error_of([] { make("RandomAffine", {{"degrees", {5}}, {"angle", {3}}}); });
  EXPECT_NE(arg.find("RandomAffine: no argument 'angle'"), std::string::npos) << arg;
  EXPECT_NE(arg.find("degrees, translate, scale, shear, p, same_on_batch"), std::string::npos) << arg;
  const auto expect = [](const std::string& name, const Args& args, const std::string& want) {
    const std::string m = xlaunch::test::usage_error_of([&] { make(name, args); });
    EXPECT_NE(m.find(want), std::string::npos) << m;
  };
  expect("RandomAffine", {{"degrees", {-5}}}, "RandomAffine: degrees = (-5) is not allowed: one number v in [0, 360]");
  expect("RandomAffine", {}, "RandomAffine: degrees = () is not allowed: required");
  expect("RandomAffine", {{"degrees", {5}}, {"scale", {1.2, 0.8}}},
         "RandomAffine: scale = (1.2, 0.8) is not allowed: give (min, max) with 0 <= min <= max <= inf");
  expect("RandomAffine", {{"degrees", {5}}, {"scale", {0, 0}}},
         "RandomAffine: scale = (0, 0) is not allowed: give factors > 0");
  expect("RandomAffine", {{"degrees", {5}}, {"translate", {0.1, 1.5}}}, "translate = (0.1, 1.5) is not allowed");
  expect("RandomAffine", {{"degrees", {5}}, {"p", {1.5}}}, "RandomAffine: p = (1.5) is not allowed: give a number in [0, 1]");
  expect("RandomPerspective", {{"distortion_scale", {2}}},
         "RandomPerspective: distortion_scale = (2) is not allowed: give a number in [0, 1]");
  expect("RandomResizedCrop", {}, "RandomResizedCrop: size = () is not allowed: required");
  expect("RandomResizedCrop", {{"size", {8, 8}}, {"p", {0.5}}}, "RandomResizedCrop: p = (0.5) is not allowed: only 1");
  expect("RandomResizedCrop", {{"size", {8, 8}}, {"ratio", {0, 1}}}, "ratio = (0, 1) is not allowed");
  expect("RandomHorizontalFlip", {{"same_on_batch", {0.5}}}, "same_on_batch = (0.5) is not allowed");
}

TEST(Apply, RefusesWhatIsNotABatchOfImages) {
  const auto t = affine();
  const Params p = t->draw(BatchKey{0, 0, {1, 2}}, 0, 8, 8);
  EXPECT_NE(xlaunch::test::usage_error_of([&] { t->apply(at::zeros({2, 8, 8}), p); }).find("RandomAffine: the images must be"),
            std::string::npos);
  EXPECT_NE(xlaunch::test::usage_error_of([&] { t->apply(at::zeros({3, 1, 8, 8}), p); }).find("values [3, 7]"), std::string::npos);
  Sequential seq({t});
  EXPECT_NE(xlaunch::test::usage_error_of([&] { seq(at::zeros({3, 1, 8, 8}), BatchKey{0, 0, {1, 2}}); }).find("B = 2"),
            std::string::npos);
}

TEST(Apply, IdentityParametersReturnTheInput) {
  const at::Tensor x = at::rand({3, 3, 9, 13});
  Params p{at::zeros({3, 7}, at::kDouble), at::ones({3}, at::kBool)};
  p.values.select(1, 3).fill_(1);
  p.values.select(1, 4).fill_(1);
  EXPECT_TRUE(at::equal(affine()->apply(x, p), x));
  // A crop of the whole image at its own size.
  const auto crop = make("RandomResizedCrop", {{"size", {9, 13}}});
  Params c{at::zeros({3, 4}, at::kDouble), at::ones({3}, at::kBool)};
  c.values.select(1, 2).fill_(13);
  c.values.select(1, 3).fill_(9);
  EXPECT_TRUE(at::allclose(crop->apply(x, c), x, 0, 1e-6));
}

TEST(Apply, RowsNotAppliedAreLeftBitwiseAlone) {
  const at::Tensor x = at::rand({6, 3, 12, 12});
  const auto t = affine(0.5);
  BatchKey key{9, 0, {0, 1, 2, 3, 4, 5}};
  const Params p = t->draw(key, 0, 12, 12);
  ASSERT_TRUE(p.applied.any().item<bool>());
  ASSERT_FALSE(p.applied.all().item<bool>());
  const at::Tensor y = t->apply(x, p);
  for (int64_t i = 0; i < 6; ++i) {
    EXPECT_EQ(at::equal(y[i], x[i]), !p.applied[i].item<bool>()) << i;
  }
}

TEST(Apply, FlipMirrorsColumns) {
  const at::Tensor x = at::rand({2, 1, 3, 4});
  Params p{at::zeros({2, 0}, at::kDouble), at::ones({2}, at::kBool)};
  EXPECT_TRUE(at::equal(make("RandomHorizontalFlip")->apply(x, p), x.flip(-1)));
}

TEST(Warp, CpuKernelMatchesTheGridPath) {
  const at::Tensor x = at::rand({5, 3, 17, 23});
  Sequential seq({affine(), make("RandomPerspective", {{"distortion_scale", {0.7}}, {"p", {1}}}),
                  make("RandomResizedCrop", {{"size", {11, 19}}})});
  const BatchKey key{21, 3, {7, 8, 9, 10, 11}};
  const at::Tensor kernel = seq(x, key);
  detail::force_grid_path = true;
  const at::Tensor grid = seq(x, key);
  detail::force_grid_path = false;
  EXPECT_EQ(kernel.sizes(), (std::vector<int64_t>{5, 3, 11, 19}));
  EXPECT_LE((kernel - grid).abs().max().item<double>(), 1e-5);
  // Double images take the kernel too, and agree with float.
  EXPECT_LE((seq(x.to(at::kDouble), key) - kernel).abs().max().item<double>(), 1e-5);
  // Half and bfloat16 are resampled in float32: only the result's rounding differs (an 8-bit
  // mantissa's grid would put 224-pixel coordinates half a pixel off).
  const at::Tensor bf16 = seq(x.to(at::kBFloat16), key);
  EXPECT_EQ(bf16.scalar_type(), at::kBFloat16);
  EXPECT_LE((bf16.to(at::kFloat) - seq(x.to(at::kBFloat16).to(at::kFloat), key)).abs().max().item<double>(), 1.0 / 128);
}

// The warp read pixel by pixel, in double: bilinear at m * (x, y, 1), a neighbour outside the image
// counted as 0 (Kornia's zeros padding).
at::Tensor reference_warp(const at::Tensor& images, const std::vector<detail::Mat3>& maps, int64_t out_h,
                          int64_t out_w, bool projective) {
  const at::Tensor in = images.to(at::kDouble).contiguous();
  const int64_t batch = in.size(0), channels = in.size(1), h = in.size(2), w = in.size(3);
  at::Tensor out = at::zeros({batch, channels, out_h, out_w}, at::kDouble);
  const double* s = in.const_data_ptr<double>();
  double* o = out.data_ptr<double>();
  for (int64_t b = 0; b < batch; ++b) {
    const detail::Mat3& m = maps[b];
    for (int64_t y = 0; y < out_h; ++y) {
      for (int64_t x = 0; x < out_w; ++x) {
        double sx = m[0] * x + m[1] * y + m[2], sy = m[3] * x + m[4] * y + m[5];
        if (projective) {
          const double z = m[6] * x + m[7] * y + m[8];
          sx /= z;
          sy /= z;
        }
        if (!(std::abs(sx) < 1e6 && std::abs(sy) < 1e6)) continue;
        const double fx = std::floor(sx), fy = std::floor(sy);
        const double ax = sx - fx, ay = sy - fy;
        for (int64_t c = 0; c < channels; ++c) {
          const double* plane = s + (b * channels + c) * h * w;
          double sum = 0;
          for (int dy = 0; dy < 2; ++dy) {
            for (int dx = 0; dx < 2; ++dx) {
              const int64_t px = static_cast<int64_t>(fx) + dx, py = static_cast<int64_t>(fy) + dy;
              if (px < 0 || px >= w || py < 0 || py >= h) continue;
              sum += (dx ? ax : 1 - ax) * (dy ? ay : 1 - ay) * plane[py * w + px];
            }
          }
          o[((b * channels + c) * out_h + y) * out_w + x] = sum;
        }
      }
    }
  }
  return out;
}

// The kernel's and the grid path's edges: images down to 2 x 2 (and 1 x N, which the kernel leaves
// to the grid path), rows longer than the kernel's 64-pixel blocks, 1, 3 and 4 channels, positions
// exactly on the image's borders and one pixel beyond them, far outside, and a projective map
// whose third coordinate crosses 0 (the position at infinity is padding, not NaN).
TEST(Warp, KernelEdgesMatchAPixelByPixelReference) {
  const std::vector<std::array<int64_t, 2>> sizes = {{2, 2}, {2, 7}, {5, 2}, {1, 6}, {6, 1}, {9, 70}, {67, 130}};
  for (const auto& hw : sizes) {
    const int64_t h = hw[0], w = hw[1];
    for (const int64_t channels : {1, 3, 4}) {
      const at::Tensor x = at::rand({6, channels, h, w}) * 2 - 0.5;
      const double a = 0.4, cx = (w - 1) / 2.0, cy = (h - 1) / 2.0;
      const std::vector<detail::Mat3> affine_maps = {
          {1, 0, 0, 0, 1, 0, 0, 0, 1},                                  // identity
          {1, 0, -1, 0, 1, static_cast<double>(h - 1), 0, 0, 1},      // positions on x = -1 and y = h - 1 + y
          {1, 0, static_cast<double>(w), 0, 1, -1, 0, 0, 1},          // x = w + x: every pixel beyond
          {1, 0, -0.5, 0, 1, 0.25, 0, 0, 1},                            // half a pixel, a quarter
          {std::cos(a), -std::sin(a), cx - std::cos(a) * cx + std::sin(a) * cy, std::sin(a), std::cos(a),
           cy - std::sin(a) * cx - std::cos(a) * cy, 0, 0, 1},          // rotation about the centre
          {1, 0, 1e9, 0, 1, -1e9, 0, 0, 1}};                            // far outside
      std::vector<detail::Mat3> projective_maps = affine_maps;
      projective_maps[0] = {1, 0, 0, 0, 1, 0, 0.01, 0.02, 1};
      projective_maps[5] = {1, 0.1, 0, 0, 1, 0, 1, 0, -3};  // z = x - 3: 0 at x = 3
      for (const bool projective : {false, true}) {
        const auto& maps = projective ? projective_maps : affine_maps;
        const at::Tensor want = reference_warp(x, maps, h + 1, w + 3, projective);
        for (const bool grid : {false, true}) {
          for (const auto dtype : {at::kFloat, at::kDouble}) {
            const std::string where = std::to_string(h) + "x" + std::to_string(w) + " channels " +
                                      std::to_string(channels) + (projective ? " projective" : " affine") +
                                      (grid ? " grid path " : " kernel ") + c10::toString(dtype);
            detail::force_grid_path = grid;
            const at::Tensor got = detail::warp(x.to(dtype), maps, h + 1, w + 3, projective);
            detail::force_grid_path = false;
            ASSERT_TRUE(got.isfinite().all().item<bool>()) << where;
            for (int64_t k = 0; k < 6; ++k) {
              // The grid path's positions are normalised to [-1, 1] and back in float32 (2e-5 seen
              // at 130 pixels), and near the position at infinity they are ill-conditioned.
              const double tolerance = !grid                      ? (dtype == at::kFloat ? 2e-6 : 1e-12)
                                       : (projective && k == 5) ? 1e-3
                                                                 : 5e-5;
              EXPECT_LE((got[k].to(at::kDouble) - want[k]).abs().max().item<double>(), tolerance)
                  << where << ", map " << k;
            }
          }
        }
      }
    }
  }
}

// Outside the image the result is 0, even beside a pixel that is inf (not 0 x inf), and so is a
// position that is NaN (0 / 0 through a projective map).
TEST(Warp, PaddingIsZeroBesideAnInfinitePixelAndAtNaN) {
  at::Tensor x = at::ones({1, 3, 8, 8});
  x.select(2, 7).select(2, 7).fill_(std::numeric_limits<float>::infinity());
  for (const bool grid : {false, true}) {
    detail::force_grid_path = grid;
    const at::Tensor far = detail::warp(x, {{1, 0, 1e6, 0, 1, 1e6, 0, 0, 1}}, 8, 8, false);
    const at::Tensor nan = detail::warp(x, {{0, 0, 0, 0, 0, 0, 0, 0, 0}}, 8, 8, true);
    detail::force_grid_path = false;
    EXPECT_TRUE(at::equal(far, at::zeros_like(far))) << (grid ? "grid path" : "kernel");
    EXPECT_TRUE(at::equal(nan, at::zeros_like(nan))) << (grid ? "grid path" : "kernel");
  }
}

// On a loader worker (rows_on_this_thread_only) the kernels run the rows on the calling thread:
// the same values as split over LibTorch's threads.
TEST(Warp, RowsOnOneThreadGiveTheSameImages) {
  const at::Tensor x = at::rand({9, 3, 40, 33});
  Sequential seq({make("ColorJitter", {{"brightness", {0.4}}, {"hue", {0.1}}}), affine(),
                  make("RandomPerspective", {{"distortion_scale", {0.5}}, {"p", {1}}})});
  const BatchKey key{4, 0, {1, 2, 3, 4, 5, 6, 7, 8, 9}};
  const at::Tensor split = seq(x, key);
  detail::rows_on_this_thread_only = true;
  const at::Tensor alone = seq(x, key);
  detail::rows_on_this_thread_only = false;
  EXPECT_TRUE(at::equal(split, alone));
}

}  // namespace
}  // namespace xlaunch::augment
