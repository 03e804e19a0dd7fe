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

// Any device and floating dtype: the rows that share an order as one batch, four ATen steps each.
at::Tensor color_jitter_aten(const at::Tensor& images, const Params& params);

// The CPU with float or double images (color_jitter_fusable): one thread per image at a time.
bool color_jitter_fusable(const at::Tensor& images);
at::Tensor color_jitter_fused(const at::Tensor& images, const Params& params);

}  // namespace xlaunch::augment::detail
