// Colour augmentations under Kornia 0.9's names and conventions (augment.h has the overview):
// ColorJitter and Normalize. Made by name through the registry (transform.h), with Kornia's
// keyword arguments:
//
//   aug::make("ColorJitter", {{"brightness", {0.4}}, {"contrast", {0.4}}, {"saturation", {0.4}},
//                             {"hue", {0.1}}, {"p", {1}}})
//   aug::make("Normalize", {{"mean", {0.485, 0.456, 0.406}}, {"std", {0.229, 0.224, 0.225}}})
#pragma once

#include <array>
#include <vector>

#include "xlaunch/augment/args.h"
#include "xlaunch/augment/transform.h"

namespace xlaunch::augment {

// kornia.augmentation.ColorJitter (not ColorJiggle): torchvision's formulas, on images in [0, 1].
//
// Arguments (Kornia's): brightness, contrast, saturation: one number v >= 0 draws the factor from
// [max(0, 1 - v), 1 + v], a pair (a, b) with 0 <= a <= b from [a, b]; hue: v in [0, 0.5] draws
// from [-v, v], a pair from [a, b] inside [-0.5, 0.5] (turns of the hue circle); default 0 each
// (no change). p (default 1), same_on_batch (default 0).
//
// columns(): brightness_factor, contrast_factor, saturation_factor, hue_factor (Kornia's parameter
// names; drawn in that order, each uniform in its range), then order_0 .. order_3: the order the
// four steps run in, as Kornia's `order` (0 brightness, 1 contrast, 2 saturation, 3 hue), drawn
// as a uniform permutation (Fisher-Yates: for i = 3, 2, 1, swap entry i with entry
// next() % (i + 1) of the identity).
//
// What a sample goes through, as Kornia does: its image clamped to [0, 1], then the four steps in
// its order, then clamped to [0, 1] again:
//   brightness: x * f, clamped to [0, 1] (multiplicative, torchvision's; Kornia's ColorJiggle adds
//               f - 1 instead);
//   contrast:   x * f + m * (1 - f), clamped, m the mean over the image of its grayscale
//               (0.299 r + 0.587 g + 0.114 b) at that point of the chain;
//   saturation: gray * (1 - f) + x * f, clamped (a blend with the grayscale, not an HSV scale);
//   hue:        in HSV (Kornia's rgb_to_hsv / hsv_to_rgb), h + f turns modulo one turn.
// One difference, deliberate: Kornia draws one order per call, shared by the batch; here each
// sample draws its own, so that a sample's augmentation depends on its key alone and not on the
// batch it lands in (augment.h). With same_on_batch every row takes row 0's, Kornia's behaviour.
//
// Images: [B, 1 or 3, H, W] floating point, on any device. A 1-channel image is refused (UsageError
// naming ColorJitter) when saturation or hue can change it: both need colour (Kornia's hue step
// fails on it the same way; its saturation step would leave a gray image unchanged). Brightness and
// contrast alone take 1 channel (contrast's mean is then the image's own).
//
// A step whose factor is neutral (1; hue 0) is skipped for that sample, as Kornia skips it.
//
// On the CPU with float or double images the four steps run fused: one pass over each image
// (two when the contrast step needs the mean the steps before it leave), every pixel's steps in
// vector registers (AVX2 where the CPU has it), the images in parallel (at::parallel_for); about
// 14x Kornia's own ColorJitter on 2 cores (docs/benchmarks.md). Elsewhere (CUDA, half precision)
// batched ATen ops run them: four positions, each sample running its own step at each, about 60
// kernels a position whatever the batch.
class ColorJitter : public Transform {
 public:
  ColorJitter(Range brightness, Range contrast, Range saturation, Range hue, Options options);
  // From Kornia's keyword arguments (the registry's factory); UsageError for a value out of range.
  static std::shared_ptr<ColorJitter> from_args(const Args& args);

  std::string name() const override { return "ColorJitter"; }
  std::vector<std::string> columns() const override;
  const Options& options() const override { return options_; }
  void sample(Rng& rng, int64_t height, int64_t width, double* values) const override;
  at::Tensor apply(const at::Tensor& images, const Params& params) const override;
  bool row_by_row() const override { return true; }

 private:
  std::array<Range, 4> ranges_;  // brightness, contrast, saturation, hue
  Options options_;
};

// kornia.augmentation.Normalize: (x - mean[c]) / std[c] per channel, not clamped.
//
// Arguments: mean, std: one number (every channel) or one per channel (its length must then be the
// images' channel count); std nonzero. p (default 1): as in Kornia, one draw gates the whole batch
// (same_on_batch is always on: the draw of the batch's first row). columns(): none.
// Images: [B, C, H, W] floating point on any device; the result is not clamped.
class Normalize : public Transform {
 public:
  Normalize(std::vector<double> mean, std::vector<double> std, double p = 1.0);
  static std::shared_ptr<Normalize> from_args(const Args& args);

  std::string name() const override { return "Normalize"; }
  std::vector<std::string> columns() const override { return {}; }
  const Options& options() const override { return options_; }
  void sample(Rng&, int64_t, int64_t, double*) const override {}
  at::Tensor apply(const at::Tensor& images, const Params& params) const override;
  bool row_by_row() const override { return true; }

 private:
  std::vector<double> mean_;
  std::vector<double> std_;
  Options options_;
};

}  // namespace xlaunch::augment
