// Geometric augmentations under Kornia 0.9's names, keyword arguments and conventions (augment.h
// has the overview; docs/data-loading.md#augmentation-on-the-device the correspondence table).
// Each is made by name, augment::make("RandomAffine", {{"degrees", {15}}}), or constructed from the
// same Args; an argument out of its range is a UsageError naming the transform, the argument, the
// value and the allowed range.
//
// Conventions, as Kornia 0.9's defaults for each class: bilinear interpolation, padding with zeros
// (RandomAffine, RandomPerspective), pixel coordinates with (0, 0) the centre of the top-left pixel.
// Kornia's warp_affine / warp_perspective normalise the matrix to the grid with the input and the
// output size (normalize_homography) and invert it; with equal input and output sizes that maps
// output pixel centres to input pixel centres whatever align_corners is, so the warps here apply
// the inverse matrix to pixel coordinates directly: the same samples (within float rounding).
//
// Draws: each sample's generator (transform.h) first draws u < p, then the values in the order
// listed for each transform, each uniform: U(a, b) = a + (b - a) * u with u in [0, 1) (53 bits),
// as torch's Uniform computes it. A range that is not given draws from [v, v], so the stream is
// the same whichever arguments are given.
//
// Computation: the B x 3 x 3 matrices are built on the host in float64 from Params and inverted
// there. On the CPU (float or double images, at least 2 x 2) one kernel per transform maps every
// output pixel and samples it (blocks of 64 pixels in vector registers, threads over rows); on
// other devices, and for other dtypes, the matrices go to the
// device (on CUDA from pinned memory, non_blocking: no host wait) and one grid +
// at::grid_sampler_2d per transform does the same.
// Rows whose `applied` is false are copied, not warped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "xlaunch/augment/args.h"
#include "xlaunch/augment/transform.h"

namespace xlaunch::augment {

// RandomAffine(degrees, translate=None, scale=None, shear=None, p=0.5, same_on_batch=False).
//  degrees: v in [0, 360] -> [-v, v], or (min, max) within [-360, 360]. Kornia passes -angle to
//           get_rotation_matrix2d: a positive angle turns the image the other way from
//           kornia.geometry.rotate's, as in Kornia's RandomAffine.
//  translate: (a, b) in [0, 1]: the shift is U(-a, a) * width, U(-b, b) * height pixels.
//  scale: (a, b) with 0 <= a <= b: one factor for both axes; (a, b, c, d): x from [a, b], y from
//         [c, d].
//  shear: v -> x shear in [-v, v] degrees; (a, b) -> x in [a, b]; (a, b, c, d) -> x in [a, b],
//         y in [c, d]; all within [-360, 360].
// Columns (the draw order is angle, scale_x, scale_y, translate_x, translate_y, shear_x, shear_y,
// as Kornia's AffineGenerator; scale_y is always drawn, and replaced by scale_x unless the
// 4-number form is given):
//   angle (degrees), translate_x, translate_y (pixels), scale_x, scale_y, shear_x, shear_y (degrees).
// Matrix (Kornia's get_affine_matrix2d), centre c = ((W - 1) / 2, (H - 1) / 2):
//   M = T(c + t) R(-angle) S(scale) T(-c) Shear(c, shear_x, shear_y), with Kornia's shear matrix
//   [[1, -tx, tx*cy], [-ty, 1 + tx*ty, ty*(cx - tx*cy)]], tx = tan(shear_x), ty = tan(shear_y);
//   output(p) = input(M^-1 p).
class RandomAffine final : public Transform {
 public:
  explicit RandomAffine(const Args& args);
  std::string name() const override { return "RandomAffine"; }
  std::vector<std::string> columns() const override;
  const Options& options() const override { return options_; }
  void sample(Rng& rng, int64_t height, int64_t width, double* values) const override;
  at::Tensor apply(const at::Tensor& images, const Params& params) const override;
  bool row_by_row() const override { return true; }

 private:
  Options options_;
  Range degrees_, translate_x_, translate_y_, scale_x_, scale_y_, shear_x_, shear_y_;
  bool scale_y_own_ = false;  // the 4-number scale: y drawn apart
};

// RandomPerspective(distortion_scale=0.5, p=0.5, same_on_batch=False); distortion_scale in [0, 1].
// Start points: the corners (0, 0), (W-1, 0), (W-1, H-1), (0, H-1) (an axis of size 1: 1 and no
// offset, as Kornia). End points: start + d * (W/2, H/2) * u * sign, with u in [0, 1) drawn per
// corner and axis (x then y, corner by corner) and the signs (+,+), (-,+), (-,-), (+,-): every
// corner moves inwards (Kornia's "basic" sampling_method, its default).
// Columns: end_x0, end_y0, end_x1, end_y1, end_x2, end_y2, end_x3, end_y3 (pixels).
// Matrix: the homography taking the start points to the end points (Kornia's closed form,
// get_perspective_transform); output(p) = input(M^-1 p).
class RandomPerspective final : public Transform {
 public:
  explicit RandomPerspective(const Args& args);
  std::string name() const override { return "RandomPerspective"; }
  std::vector<std::string> columns() const override;
  const Options& options() const override { return options_; }
  void sample(Rng& rng, int64_t height, int64_t width, double* values) const override;
  at::Tensor apply(const at::Tensor& images, const Params& params) const override;
  bool row_by_row() const override { return true; }

 private:
  Options options_;
  double distortion_scale_ = 0.5;
};

// RandomResizedCrop(size, scale=(0.08, 1), ratio=(3/4, 4/3), p=1, same_on_batch=False).
//  size: (height, width) of the output, each >= 1 (required).
//  scale: (a, b), 0 <= a <= b: the crop's area as a fraction of the image's.
//  ratio: (a, b), 0 < a <= b: the crop's width / height, drawn log-uniformly.
//  p: must be 1. Kornia draws it once per batch (p_batch) and returns a batch not cropped at its
//     input size; rows of one batch cannot differ in size, so only p = 1 is accepted.
// Draws (Kornia's ResizedCropGenerator): 10 area fractions U(a, b), then 10 log ratios
// U(log a, log b); the first try k with 0 < w <= W and 0 < h <= H, w = round(sqrt(area * ratio)),
// h = round(sqrt(area / ratio)) (half to even), gives the crop, else Kornia's fallback (the whole
// image, or its largest centre part within the ratio range); then x = floor(u * (W - w + 1)),
// y = floor(u * (H - h + 1)).
// Columns: crop_x, crop_y, crop_width, crop_height (pixels, whole numbers).
// Resampling: Kornia's default cropping_mode "slice": the crop, resized bilinearly with
// align_corners=True (Kornia's default for this class): output pixel (i, j) samples the input at
// (crop_x + j * (crop_width - 1) / (out_w - 1), crop_y + i * (crop_height - 1) / (out_h - 1))
// (0 when the output axis has one pixel).
class RandomResizedCrop final : public Transform {
 public:
  explicit RandomResizedCrop(const Args& args);
  std::string name() const override { return "RandomResizedCrop"; }
  std::vector<std::string> columns() const override;
  const Options& options() const override { return options_; }
  void sample(Rng& rng, int64_t height, int64_t width, double* values) const override;
  at::Tensor apply(const at::Tensor& images, const Params& params) const override;
  bool row_by_row() const override { return true; }
  std::pair<int64_t, int64_t> output_size(int64_t, int64_t) const override { return {height_, width_}; }

 private:
  Options options_;
  int64_t height_ = 0, width_ = 0;
  Range scale_, log_ratio_;
  double ratio_low_ = 0, ratio_high_ = 0;
};

// RandomHorizontalFlip(p=0.5, same_on_batch=False): mirrors the columns (Kornia's hflip,
// input.flip(-1)). No columns: only `applied` is drawn.
class RandomHorizontalFlip final : public Transform {
 public:
  explicit RandomHorizontalFlip(const Args& args);
  std::string name() const override { return "RandomHorizontalFlip"; }
  std::vector<std::string> columns() const override { return {}; }
  const Options& options() const override { return options_; }
  void sample(Rng&, int64_t, int64_t, double*) const override {}
  at::Tensor apply(const at::Tensor& images, const Params& params) const override;
  bool row_by_row() const override { return true; }

 private:
  Options options_;
};

}  // namespace xlaunch::augment
