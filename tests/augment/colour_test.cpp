// ColorJitter and Normalize (xlaunch/augment/colour.h) without Kornia: their arguments (Kornia's
// ranges and messages), their draws, literal answers of each step on both implementations, the
// two implementations against each other, and the refusals. colour_kornia_test compares them with
// Kornia itself.
#include <gtest/gtest.h>

#include <ATen/ops/allclose.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/rand.h>
#include <ATen/ops/tensor.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "augment/colour_kernels.h"
#include "xlaunch/augment.h"
#include "xlaunch/error.h"
#include "usage_error.h"

namespace xlaunch::augment {
namespace {

BatchKey ids_key(std::vector<int64_t> ids, uint64_t seed = 7, int64_t epoch = 0) { return BatchKey{seed, epoch, std::move(ids)}; }

std::vector<int64_t> range_ids(int64_t n) {
  std::vector<int64_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = i;
  return ids;
}

// Parameters of `rows` rows, each the given 8 values, all applied.
Params params_of(const std::vector<double>& row, int64_t rows = 1) {
  Params p{at::empty({rows, 8}, at::kDouble), at::ones({rows}, at::kBool)};
  for (int64_t i = 0; i < rows; ++i) std::copy(row.begin(), row.end(), p.values.data_ptr<double>() + i * 8);
  return p;
}

// One 1x3x1x1 pixel through both implementations; both must give `expected` within 1e-6.
void expect_pixel(const std::vector<double>& rgb, const std::vector<double>& row, const std::vector<double>& expected) {
  const at::Tensor x = at::tensor(rgb, at::kFloat).view({1, 3, 1, 1});
  const at::Tensor want = at::tensor(expected, at::kFloat).view({1, 3, 1, 1});
  const Params p = params_of(row);
  EXPECT_TRUE(at::allclose(detail::color_jitter_fused(x, p), want, 0, 1e-6)) << detail::color_jitter_fused(x, p);
  EXPECT_TRUE(at::allclose(detail::color_jitter_aten(x, p), want, 0, 1e-6)) << detail::color_jitter_aten(x, p);
}

TEST(ColorJitter, StepsGiveTheirLiteralAnswers) {
  // brightness 0.5 of (0.8, 0.4, 0.2), and 2.0 clamps to 1.
  expect_pixel({0.8, 0.4, 0.2}, {0.5, 1, 1, 0, 0, 1, 2, 3}, {0.4, 0.2, 0.1});
  expect_pixel({0.8, 0.4, 0.2}, {2.0, 1, 1, 0, 0, 1, 2, 3}, {1.0, 0.8, 0.4});
  // saturation 0 of pure red: its gray, 0.299, in every channel.
  expect_pixel({1, 0, 0}, {1, 1, 0, 0, 0, 1, 2, 3}, {0.299, 0.299, 0.299});
  // hue: red shifted half a turn is cyan, a third of a turn green, minus a third blue.
  expect_pixel({1, 0, 0}, {1, 1, 1, 0.5, 0, 1, 2, 3}, {0, 1, 1});
  expect_pixel({1, 0, 0}, {1, 1, 1, 1.0 / 3, 0, 1, 2, 3}, {0, 1, 0});
  expect_pixel({1, 0, 0}, {1, 1, 1, -1.0 / 3, 0, 1, 2, 3}, {0, 0, 1});
  // contrast 0 of a one-pixel image: its own gray mean; brightness 0.5 first halves it.
  expect_pixel({0.8, 0.4, 0.2}, {1, 0, 1, 0, 0, 1, 2, 3}, {0.4968, 0.4968, 0.4968});
  expect_pixel({0.8, 0.4, 0.2}, {0.5, 0, 1, 0, 0, 1, 2, 3}, {0.2484, 0.2484, 0.2484});
  // The order matters: brightness 2 then saturation 0 is gray of (1, 0.8, 0.4), saturation 0 then
  // brightness 2 twice gray of (0.8, 0.4, 0.2).
  expect_pixel({0.8, 0.4, 0.2}, {2, 1, 0, 0, 0, 2, 1, 3}, {0.8142, 0.8142, 0.8142});
  expect_pixel({0.8, 0.4, 0.2}, {2, 1, 0, 0, 2, 0, 1, 3}, {0.9936, 0.9936, 0.9936});
  // The input is clamped to [0, 1] first: (1.5, -0.5, 0.5) is (1, 0, 0.5).
  expect_pixel({1.5, -0.5, 0.5}, {1, 1, 1, 0, 0, 1, 2, 3}, {1, 0, 0.5});
}

TEST(ColorJitter, ContrastBlendsWithTheMeanOfTheImageAtItsTurn) {
  // Two pixels, gray 0.2 and 0.6: mean 0.4. Contrast 0.5 pulls each half-way to it.
  const at::Tensor x = at::tensor({0.2, 0.6, 0.2, 0.6, 0.2, 0.6}, at::kFloat).view({1, 3, 1, 2});
  const at::Tensor want = at::tensor({0.3, 0.5, 0.3, 0.5, 0.3, 0.5}, at::kFloat).view({1, 3, 1, 2});
  const Params contrast_first = params_of({0.5, 0.5, 1, 0, 1, 0, 2, 3});
  // brightness 0.5 first: mean 0.2 of (0.1, 0.3): 0.15 and 0.25.
  const at::Tensor want_after = at::tensor({0.15, 0.25, 0.15, 0.25, 0.15, 0.25}, at::kFloat).view({1, 3, 1, 2});
  const Params brightness_first = params_of({0.5, 0.5, 1, 0, 0, 1, 2, 3});
  for (const auto& run : {detail::color_jitter_fused, detail::color_jitter_aten}) {
    EXPECT_TRUE(at::allclose(run(x, params_of({1, 0.5, 1, 0, 1, 0, 2, 3})), want, 0, 1e-6));
    EXPECT_TRUE(at::allclose(run(x, contrast_first), want * 0.5, 0, 1e-6));
    EXPECT_TRUE(at::allclose(run(x, brightness_first), want_after, 0, 1e-6));
  }
}

TEST(ColorJitter, BothImplementationsAgreeOnRandomBatches) {
  const auto jitter = make("ColorJitter", {{"brightness", {0, 2.5}}, {"contrast", {0, 2.5}},
                                           {"saturation", {0, 2.5}}, {"hue", {0.5}}, {"p", {0.8}}});
  for (const at::ScalarType dtype : {at::kFloat, at::kDouble}) {
    at::manual_seed(3);
    const at::Tensor x = (at::rand({64, 3, 19, 23}, dtype) * 1.2 - 0.1);
    const Params p = jitter->draw(ids_key(range_ids(64)), 0, 19, 23);
    const at::Tensor fused = jitter->apply(x, p);
    EXPECT_TRUE(at::allclose(fused, detail::color_jitter_aten(x, p), 0, 1e-5)) << c10::toString(dtype);
    // A non-contiguous batch (channels last) gives the same.
    EXPECT_TRUE(at::allclose(jitter->apply(x.contiguous(at::MemoryFormat::ChannelsLast), p), fused, 0, 0));
  }
}

TEST(ColorJitter, ArgumentsFollowKorniasRanges) {
  const auto jitter = ColorJitter::from_args({{"brightness", {0.4}}, {"contrast", {1.5}}, {"saturation", {0.5, 1.2}},
                                              {"hue", {0.1}}});
  double lo[4] = {9, 9, 9, 9}, hi[4] = {-9, -9, -9, -9};
  std::set<std::vector<double>> orders;
  for (int64_t id = 0; id < 2000; ++id) {
    Rng rng(mix_seed(1, id));
    double v[8];
    jitter->sample(rng, 8, 8, v);
    for (int k = 0; k < 4; ++k) lo[k] = std::min(lo[k], v[k]), hi[k] = std::max(hi[k], v[k]);
    std::vector<double> order(v + 4, v + 8);
    std::vector<double> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    ASSERT_EQ(sorted, (std::vector<double>{0, 1, 2, 3})) << "order of id " << id << " is not a permutation";
    orders.insert(order);
  }
  // brightness 0.4: [0.6, 1.4]; contrast 1.5: [max(0, -0.5), 2.5] = [0, 2.5]; saturation (0.5, 1.2);
  // hue 0.1: [-0.1, 0.1]. 2000 draws come within 2% of each end.
  const double want[4][2] = {{0.6, 1.4}, {0, 2.5}, {0.5, 1.2}, {-0.1, 0.1}};
  for (int k = 0; k < 4; ++k) {
    EXPECT_GE(lo[k], want[k][0]);
    EXPECT_LE(hi[k], want[k][1]);
    EXPECT_LT(lo[k], want[k][0] + 0.02 * (want[k][1] - want[k][0])) << k;
    EXPECT_GT(hi[k], want[k][1] - 0.02 * (want[k][1] - want[k][0])) << k;
  }
  EXPECT_EQ(orders.size(), 24u) << "every order of the four steps is drawn";
  EXPECT_EQ(jitter->columns(), (std::vector<std::string>{"brightness_factor", "contrast_factor", "saturation_factor",
                                                         "hue_factor", "order_0", "order_1", "order_2", "order_3"}));
  EXPECT_EQ(jitter->options().p, 1.0);
}

TEST(ColorJitter, ASamplesParametersDependOnItsKeyAlone) {
  const auto jitter = make("ColorJitter", {{"brightness", {0.4}}, {"hue", {0.1}}});
  const Params batch = jitter->draw(ids_key({5, 6, 7}), 2, 32, 32);
  const Params alone = jitter->draw(ids_key({7}), 2, 32, 32);
  EXPECT_TRUE(batch.values[2].equal(alone.values[0]));
  EXPECT_FALSE(batch.values[0].equal(batch.values[1]));
  EXPECT_FALSE(jitter->draw(ids_key({7}, 7, 1), 2, 32, 32).values.equal(alone.values)) << "another epoch";
  EXPECT_FALSE(jitter->draw(ids_key({7}), 3, 32, 32).values.equal(alone.values)) << "another position";
}

TEST(ColorJitter, NoArgumentsIsTheClampAlone) {
  const auto jitter = make("ColorJitter");
  at::manual_seed(4);
  const at::Tensor x = at::rand({4, 3, 5, 5}) * 1.4 - 0.2;
  const Params p = jitter->draw(ids_key(range_ids(4)), 0, 5, 5);
  EXPECT_TRUE(jitter->apply(x, p).equal(x.clamp(0, 1)));
  EXPECT_TRUE(detail::color_jitter_aten(x, p).equal(x.clamp(0, 1)));
}

TEST(ColorJitter, RefusesWhatKorniaRefuses) {
  EXPECT_NE(xlaunch::test::usage_error_of([] { make("ColorJitter", {{"hue", {0.6}}}); }).find("ColorJitter: hue"), std::string::npos);
  EXPECT_NE(xlaunch::test::usage_error_of([] { make("ColorJitter", {{"brightness", {-1}}}); }).find("ColorJitter: brightness"),
            std::string::npos);
  EXPECT_NE(xlaunch::test::usage_error_of([] { make("ColorJitter", {{"contrast", {1.2, 0.8}}}); }).find("ColorJitter: contrast"),
            std::string::npos);
  EXPECT_NE(xlaunch::test::usage_error_of([] { make("ColorJitter", {{"gamma", {1}}}); }).find("no argument 'gamma'"),
            std::string::npos);

  const auto jitter = make("ColorJitter", {{"saturation", {0.4}}});
  const at::Tensor gray = at::rand({2, 1, 4, 4});
  const Params p = jitter->draw(ids_key({0, 1}), 0, 4, 4);
  const std::string message = xlaunch::test::usage_error_of([&] { jitter->apply(gray, p); });
  EXPECT_NE(message.find("ColorJitter"), std::string::npos) << message;
  EXPECT_NE(message.find("1 channel"), std::string::npos) << message;
  EXPECT_NE(xlaunch::test::usage_error_of([&] { make("ColorJitter", {{"hue", {0.1}}})->apply(gray, p); }).find("1 channel"),
            std::string::npos);
  EXPECT_NE(xlaunch::test::usage_error_of([&] { jitter->apply(at::rand({2, 2, 4, 4}), p); }).find("ColorJitter"), std::string::npos);
  // Brightness and contrast alone take a gray image (contrast's mean is its own).
  const auto bc = make("ColorJitter", {{"brightness", {0.4}}, {"contrast", {0.4}}});
  const Params q = bc->draw(ids_key({0, 1}), 0, 4, 4);
  EXPECT_TRUE(at::allclose(bc->apply(gray, q), detail::color_jitter_aten(gray, q), 0, 1e-6));
}

TEST(Normalize, SubtractsAndDividesPerChannel) {
  const auto normalize = make("Normalize", {{"mean", {0.5, 0.25, 0}}, {"std", {0.5, 0.25, 2}}});
  const at::Tensor x = at::full({2, 3, 2, 2}, 1.0);
  const Params p = normalize->draw(ids_key({0, 1}), 0, 2, 2);
  const at::Tensor y = normalize->apply(x, p);
  EXPECT_TRUE(y.select(1, 0).eq(1).all().item<bool>());
  EXPECT_TRUE(y.select(1, 1).eq(3).all().item<bool>());
  EXPECT_TRUE(y.select(1, 2).eq(0.5).all().item<bool>());
  EXPECT_TRUE(normalize->columns().empty());
  // One number serves every channel; the result is not clamped.
  EXPECT_TRUE(make("Normalize", {{"mean", {2}}, {"std", {0.5}}})->apply(x, p).eq(-2).all().item<bool>());
}

TEST(Normalize, GatesTheWholeBatchWithOneDraw) {
  const auto never = make("Normalize", {{"mean", {0.5}}, {"std", {0.5}}, {"p", {0}}});
  EXPECT_TRUE(never->options().same_on_batch);
  const at::Tensor x = at::rand({3, 3, 2, 2});
  EXPECT_TRUE(never->apply(x, never->draw(ids_key({0, 1, 2}), 0, 2, 2)).equal(x));
  const auto half = make("Normalize", {{"mean", {0.5}}, {"std", {0.5}}, {"p", {0.5}}});
  for (int64_t id = 0; id < 20; ++id) {
    const Params p = half->draw(ids_key({id, id + 100, id + 200}), 0, 2, 2);
    EXPECT_TRUE(p.applied.eq(p.applied[0]).all().item<bool>()) << "one gate for the batch, id " << id;
  }
}

TEST(Normalize, RefusesMismatchedStatistics) {
  const at::Tensor x = at::rand({2, 3, 2, 2});
  const auto two = make("Normalize", {{"mean", {0.5, 0.5}}, {"std", {1}}});
  const std::string message = xlaunch::test::usage_error_of([&] { two->apply(x, two->draw(ids_key({0, 1}), 0, 2, 2)); });
  EXPECT_NE(message.find("Normalize: mean"), std::string::npos) << message;
  EXPECT_NE(message.find("3 channels"), std::string::npos) << message;
  EXPECT_NE(xlaunch::test::usage_error_of([] { make("Normalize", {{"mean", {0.5}}, {"std", {0}}}); }).find("std"), std::string::npos);
  EXPECT_NE(xlaunch::test::usage_error_of([] { make("Normalize", {{"std", {1}}}); }).find("Normalize: mean"), std::string::npos);
  EXPECT_NE(xlaunch::test::usage_error_of([] { make("Normalize", {{"mean", {0}}, {"std", {1}}, {"same_on_batch", {0}}}); })
                .find("same_on_batch"),
            std::string::npos);
}

TEST(Colour, BothAreRegisteredUnderKorniasNames) {
  const std::vector<std::string> names = registered();
  EXPECT_NE(std::find(names.begin(), names.end(), "ColorJitter"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "Normalize"), names.end());
}

}  // namespace
}  // namespace xlaunch::augment
