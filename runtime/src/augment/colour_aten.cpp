// ColorJitter as batched ATen ops, on any device (colour_kernels.h): Kornia 0.9's own steps
// (kornia.enhance's adjust_brightness_accumulative, adjust_contrast_with_mean_subtraction,
// adjust_saturation_with_gray_subtraction, adjust_hue over kornia.color's rgb_to_hsv and
// hsv_to_rgb), with the hue kept in turns instead of radians. Each row has its own order, so the
// batch goes through four positions, each row running its own step at each (step_at): about 60
// kernels per position whatever the batch and its orders, where running the rows of each order
// together would launch that many per order (up to 24).
#include <ATen/ops/amax.h>
#include <ATen/ops/amin.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/minimum.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/remainder.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>


#include <vector>

#include "augment/colour_kernels.h"
#include "augment/warp.h"

namespace xlaunch::augment::detail {
namespace {

// [n, 1, H, W]: Kornia's rgb_to_grayscale for 3 channels.
at::Tensor gray(const at::Tensor& x) {
  return (x.select(1, 0) * 0.299 + x.select(1, 1) * 0.587 + x.select(1, 2) * 0.114).unsqueeze(1);
}

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

  // hsv_to_rgb as the fused loop writes it (colour_fused.cpp): channel n = 5, 3, 1 (r, g, b) is
  // v - v s clamp(min(k, 4 - k), 0, 1), k = (n + 6h) mod 6; Kornia's table of sectors, in a few
  // kernels instead of its fifteen selects.
  const at::Tensor h6 = h * 6, vs = mx * s;
  std::vector<at::Tensor> out;
  for (const double n : {5.0, 3.0, 1.0}) {
    at::Tensor k = h6 + n;
    k = at::where(k >= 6, k - 6, k);
    out.push_back(mx - vs * at::minimum(k, 4 - k).clamp(0, 1));
  }
  return at::stack(out, 1);
}

// Position k of the rows' orders, as one batched step: each row runs its own step there. The
// brightness, contrast and saturation rows are one blend, x * a + gray * g + mean * m, clamped,
// with per-row coefficients (brightness (f, 0, 0), contrast (f, 0, 1 - f), saturation
// (f, 1 - f, 0), any other row (1, 0, 0)): each row's terms are Kornia's, and the zero terms add
// exact zeros, so every row gets Kornia's value. Then the rows whose step is hue take the hue
// step's output. Rows whose step is neutral (or, on a gray image, saturation or hue) pass.
at::Tensor step_at(const at::Tensor& x, const at::Tensor& values, const at::Tensor& applied, int k) {
  const int64_t rows = values.size(0);
  const double* v = values.data_ptr<double>();
  const bool* on = applied.data_ptr<bool>();
  const bool rgb = x.size(1) == 3;
  at::Tensor coef = at::empty({3, rows}, at::kDouble);  // a, g, m per row
  at::Tensor hue_rows = at::zeros({rows}, at::kBool);
  at::Tensor hue_factor = at::zeros({rows}, at::kDouble);
  double* a = coef.data_ptr<double>();
  double* g = a + rows;
  double* m = g + rows;
  bool blend = false, any_hue = false;
  for (int64_t i = 0; i < rows; ++i) {
    const double* row = v + i * kJitterColumns;
    const int step = static_cast<int>(row[kOrder + k]);
    const double f = row[step];
    a[i] = 1, g[i] = 0, m[i] = 0;
    if (!on[i] || f == kNeutral[step] || (!rgb && step >= kSaturation)) continue;
    if (step == kHue) {
      hue_rows.data_ptr<bool>()[i] = true;
      hue_factor.data_ptr<double>()[i] = f;
      any_hue = true;
      continue;
    }
    blend = true;
    a[i] = f;
    if (step == kContrast) m[i] = 1 - f;
    if (step == kSaturation) g[i] = 1 - f;
  }
  at::Tensor out = x;
  if (blend) {
    const at::Tensor c = to_device(coef, x.device(), x.scalar_type()).view({3, rows, 1, 1, 1});
    const at::Tensor gray_x = rgb ? gray(x) : x;
    const at::Tensor mean = gray_x.mean({-3, -2, -1}, true);
    out = (x * c[0] + gray_x * c[1] + mean * c[2]).clamp(0, 1);
  }
  if (any_hue) {
    const at::Tensor shifted = hue(out, to_device(hue_factor, x.device(), x.scalar_type()).view({-1, 1, 1, 1}));
    out = at::where(to_device(hue_rows, x.device(), at::kBool).view({-1, 1, 1, 1}), shifted, out);
  }
  return out;
}

}  // namespace

at::Tensor color_jitter_aten(const at::Tensor& images, const Params& params) {
  const at::Tensor values = params.values.contiguous();
  const at::Tensor applied = params.applied.contiguous();
  // As Kornia: the rows it transforms are clamped to [0, 1] before and after; the others pass.
  at::Tensor x = images.clamp(0, 1);
  for (int k = 0; k < 4; ++k) x = step_at(x, values, applied, k);
  x = x.clamp(0, 1);
  if (applied.all().item<bool>()) return x;
  return at::where(to_device(applied, images.device(), at::kBool).view({-1, 1, 1, 1}), x, images);
}

}  // namespace xlaunch::augment::detail
