// ColorJitter's two implementations (xlaunch/augment/colour.h): batched ATen ops on any device,
// and the fused CPU loop. ColorJitter::apply picks one; the tests run both against Kornia.
// Both take checked arguments: images [B, C, H, W] floating point with C = 3 (or 1 when the
// saturation and hue factors are neutral), params of ColorJitter's columns.
#pragma once

#include <ATen/core/Tensor.h>

#include "xlaunch/augment/transform.h"

namespace xlaunch::augment::detail {

// The columns' indices in Params::values (colour.h).
enum JitterColumn { kBrightness = 0, kContrast = 1, kSaturation = 2, kHue = 3, kOrder = 4, kJitterColumns = 8 };
// Per step, the factor that changes nothing. A step with it is skipped, as Kornia skips it (hue's
// round trip through HSV is not exactly the identity).
constexpr double kNeutral[4] = {1, 1, 1, 0};

// Any device and floating dtype: four batched positions, each row running its own step at each.
at::Tensor color_jitter_aten(const at::Tensor& images, const Params& params);

// The CPU with float or double images (color_jitter_fusable): one thread per image at a time.
bool color_jitter_fusable(const at::Tensor& images);
at::Tensor color_jitter_fused(const at::Tensor& images, const Params& params);

}  // namespace xlaunch::augment::detail
