// ColorJitter as batched ATen ops, on any device (colour_kernels.h): Kornia 0.9's own steps
// (kornia.enhance's adjust_brightness_accumulative, adjust_contrast_with_mean_subtraction,
// adjust_saturation_with_gray_subtraction, adjust_hue over kornia.color's rgb_to_hsv and
// hsv_to_rgb), op for op, with the hue kept in turns instead of radians.
#include <ATen/ops/amax.h>
#include <ATen/ops/amin.h>
#include <ATen/ops/floor.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/remainder.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros_like.h>

#include <map>
#include <vector>

#include "augment/colour_kernels.h"

namespace xlaunch::augment::detail {
namespace {

// [n, 1, H, W]: Kornia's rgb_to_grayscale for 3 channels.
at::Tensor gray(const at::Tensor& x) {
  return (x.select(1, 0) * 0.299 + x.select(1, 1) * 0.587 + x.select(1, 2) * 0.114).unsqueeze(1);
}

at::Tensor brightness(const at::Tensor& x, const at::Tensor& f) { return (x * f).clamp(0, 1); }

at::Tensor contrast(const at::Tensor& x, const at::Tensor& f) {
  const at::Tensor mean = x.size(1) == 3 ? gray(x).mean({-2, -1}, true) : x.mean({-3, -2, -1}, true);
  return (x * f + mean * (1 - f)).clamp(0, 1);
}

at::Tensor saturation(const at::Tensor& x, const at::Tensor& f) { return ((1 - f) * gray(x) + f * x).clamp(0, 1); }

// f in turns of the hue circle.
at::Tensor hue(const at::Tensor& x, const at::Tensor& f) {
  const at::Tensor r = x.select(1, 0), g = x.select(1, 1), b = x.select(1, 2);
  const at::Tensor mx = x.amax(1), mn = x.amin(1);
  at::Tensor delta = mx - mn;
  const at::Tensor s = delta / at::where(mx == 0, at::ones_like(mx), mx + 1e-8);
  delta = at::where(delta == 0, at::ones_like(delta), delta);
  const at::Tensor rc = mx - r, gc = mx - g, bc = mx - b;
  at::Tensor h = at::where((r >= g) & (r >= b), bc - gc, at::where(g >= b, (rc - bc) + 2 * delta, (gc - rc) + 4 * delta));
  h = at::remainder(h / delta / 6, 1.0);
  h = at::remainder(h + f.squeeze(1), 1.0);
  h = h.masked_fill(h >= 1, 0);  // a tiny negative sum rounds up to 1 itself

  const at::Tensor& v = mx;
  const at::Tensor h6 = h * 6;
  const at::Tensor sector = at::floor(h6);
  const at::Tensor frac = h6 - sector;
  const at::Tensor p = v * (1 - s), q = v * (1 - frac * s), t = v * (1 - (1 - frac) * s);
  const at::Tensor hi = sector.clamp(0, 5);
  const at::Tensor m0 = hi == 0, m1 = hi == 1, m2 = hi == 2, m3 = hi == 3, m4 = hi == 4;
  const at::Tensor ro = at::where(m0, v, at::where(m1, q, at::where(m2, p, at::where(m3, p, at::where(m4, t, v)))));
  const at::Tensor go = at::where(m0, t, at::where(m1, v, at::where(m2, v, at::where(m3, q, at::where(m4, p, p)))));
  const at::Tensor bo = at::where(m0, p, at::where(m1, p, at::where(m2, t, at::where(m3, v, at::where(m4, v, q)))));
  return at::stack({ro, go, bo}, 1);
}

using Step = at::Tensor (*)(const at::Tensor&, const at::Tensor&);
constexpr Step kSteps[4] = {brightness, contrast, saturation, hue};
constexpr double kNeutral[4] = {1, 1, 1, 0};

// The rows of `rows` through their shared order.
at::Tensor jitter_group(const at::Tensor& images, const at::Tensor& values, const std::vector<int64_t>& rows,
                        bool whole_batch) {
  const at::Tensor index = at::tensor(rows, at::kLong);
  at::Tensor x = whole_batch ? images : images.index_select(0, index.to(images.device()));
  x = x.clamp(0, 1);
  const at::Tensor mine = values.index_select(0, index);
  const double* first = mine.data_ptr<double>();
  for (int k = 0; k < 4; ++k) {
    const int step = static_cast<int>(first[kOrder + k]);
    const at::Tensor f = mine.select(1, step);
    // As Kornia: a step whose factors are all neutral is skipped (hue's round trip through HSV is
    // not exactly the identity).
    if ((f == kNeutral[step]).all().item<bool>()) continue;
    x = kSteps[step](x, f.to(images.options()).view({-1, 1, 1, 1}));
  }
  return x.clamp(0, 1);
}

}  // namespace

at::Tensor color_jitter_aten(const at::Tensor& images, const Params& params) {
  const int64_t rows = images.size(0);
  const at::Tensor values = params.values.contiguous();
  const double* v = values.data_ptr<double>();
  const bool* applied = params.applied.contiguous().data_ptr<bool>();
  std::map<int, std::vector<int64_t>> groups;  // order (base-4 code) -> its rows
  for (int64_t i = 0; i < rows; ++i) {
    if (!applied[i]) continue;
    const double* o = v + i * kJitterColumns + kOrder;
    groups[static_cast<int>(o[0] * 64 + o[1] * 16 + o[2] * 4 + o[3])].push_back(i);
  }
  if (groups.size() == 1 && static_cast<int64_t>(groups.begin()->second.size()) == rows) {
    return jitter_group(images, values, groups.begin()->second, true);
  }
  at::Tensor out = images.clone();
  for (const auto& [code, members] : groups) {
    out.index_copy_(0, at::tensor(members, at::kLong).to(images.device()), jitter_group(images, values, members, false));
  }
  return out;
}

}  // namespace xlaunch::augment::detail
