// ColorJitter (colour.h): its arguments, its draws, and the choice of implementation
// (colour_kernels.h).
#include <algorithm>
#include <cmath>
#include <utility>

#include "augment/colour_kernels.h"
#include "xlaunch/augment/colour.h"
#include "xlaunch/error.h"

namespace xlaunch::augment {
namespace {

// brightness, contrast, saturation (Kornia's _range_bound with center 1, bounds [0, inf)): v gives
// [max(0, 1 - v), 1 + v]; (a, b) itself, 0 <= a <= b.
Range factor_range(const ArgReader& read, const std::string& arg) {
  const std::vector<double> v = read.values(arg, {0}, 1, 2);
  if (v.size() == 2) return read.pair(arg, v, 0, HUGE_VAL);
  if (v[0] < 0) read.fail(arg, v, "one number v >= 0 gives the range [max(0, 1 - v), 1 + v]; or give (min, max)");
  return {std::max(0.0, 1 - v[0]), 1 + v[0]};
}

[[maybe_unused]] const bool kRegistered =
    (register_transform("ColorJitter", [](const Args& a) { return ColorJitter::from_args(a); }), true);

}  // namespace

ColorJitter::ColorJitter(Range brightness, Range contrast, Range saturation, Range hue, Options options)
    : ranges_{brightness, contrast, saturation, hue}, options_(options) {}

std::shared_ptr<ColorJitter> ColorJitter::from_args(const Args& args) {
  const ArgReader read("ColorJitter", args, {"brightness", "contrast", "saturation", "hue"});
  return std::make_shared<ColorJitter>(factor_range(read, "brightness"), factor_range(read, "contrast"),
                                       factor_range(read, "saturation"), read.symmetric("hue", {0}, -0.5, 0.5),
                                       read.options(1.0));
}

std::vector<std::string> ColorJitter::columns() const {
  return {"brightness_factor", "contrast_factor", "saturation_factor", "hue_factor",
          "order_0",           "order_1",         "order_2",           "order_3"};
}

void ColorJitter::sample(Rng& rng, int64_t, int64_t, double* values) const {
  for (int i = 0; i < 4; ++i) values[i] = rng.uniform(ranges_[i].low, ranges_[i].high);
  int order[4] = {0, 1, 2, 3};
  for (int i = 3; i > 0; --i) std::swap(order[i], order[rng.next() % static_cast<uint64_t>(i + 1)]);
  for (int i = 0; i < 4; ++i) values[detail::kOrder + i] = order[i];
}

at::Tensor ColorJitter::apply(const at::Tensor& images, const Params& params) const {
  check_apply(*this, images, params, {1, 3});
  const bool needs_colour = ranges_[detail::kSaturation].low != 1 || ranges_[detail::kSaturation].high != 1 ||
                            ranges_[detail::kHue].low != 0 || ranges_[detail::kHue].high != 0;
  if (images.size(1) == 1 && needs_colour) {
    throw UsageError("ColorJitter: the images have 1 channel, and saturation and hue need colour (3 channels); "
                     "give RGB images, or jitter a grayscale image with brightness and contrast alone "
                     "(saturation 0, hue 0)");
  }
  return detail::color_jitter_fusable(images) ? detail::color_jitter_fused(images, params)
                                              : detail::color_jitter_aten(images, params);
}

}  // namespace xlaunch::augment
