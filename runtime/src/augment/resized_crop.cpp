// RandomResizedCrop (geometric.h): Kornia's ResizedCropGenerator and its "slice" cropping (the
// crop resized bilinearly, align_corners=True).
#include <algorithm>
#include <cmath>

#include "augment/warp.h"
#include "xlaunch/augment/geometric.h"
#include "xlaunch/error.h"

namespace xlaunch::augment {

RandomResizedCrop::RandomResizedCrop(const Args& args) {
  ArgReader read("RandomResizedCrop", args, {"size", "scale", "ratio"});
  options_ = read.options(1.0);
  if (options_.p != 1) {
    read.fail("p", {options_.p}, "only 1: Kornia draws p once per batch and leaves a batch it does not crop at "
                                 "its input size, and rows of one batch cannot differ in size");
  }
  const std::vector<double> size = read.values("size", {}, 2, 2);
  if (size.empty() || !(size[0] >= 1 && size[1] >= 1 && size[0] == std::floor(size[0]) &&
                        size[1] == std::floor(size[1]))) {
    read.fail("size", size, "required: (height, width) of the output, whole numbers >= 1");
  }
  height_ = static_cast<int64_t>(size[0]);
  width_ = static_cast<int64_t>(size[1]);
  scale_ = read.pair("scale", read.values("scale", {0.08, 1.0}, 2, 2), 0, HUGE_VAL);
  const Range ratio = read.pair("ratio", read.values("ratio", {3.0 / 4.0, 4.0 / 3.0}, 2, 2), 0, HUGE_VAL);
  if (!(ratio.low > 0)) read.fail("ratio", {ratio.low, ratio.high}, "give (min, max) with 0 < min <= max");
  ratio_low_ = ratio.low;
  ratio_high_ = ratio.high;
  log_ratio_ = {std::log(ratio.low), std::log(ratio.high)};
}

std::vector<std::string> RandomResizedCrop::columns() const {
  return {"crop_x", "crop_y", "crop_width", "crop_height"};
}

void RandomResizedCrop::sample(Rng& rng, int64_t height, int64_t width, double* v) const {
  constexpr int kTries = 10;
  const double H = static_cast<double>(height), W = static_cast<double>(width);
  double area[kTries];
  for (double& a : area) a = rng.uniform(scale_.low, scale_.high) * H * W;
  double w = 0, h = 0;
  bool found = false;
  for (int k = 0; k < kTries; ++k) {
    const double ratio = std::exp(rng.uniform(log_ratio_.low, log_ratio_.high));
    // torch.round: half to even, as nearbyint in the default rounding mode.
    const double wk = std::floor(std::nearbyint(std::sqrt(area[k] * ratio)));
    const double hk = std::floor(std::nearbyint(std::sqrt(area[k] / ratio)));
    if (!found && wk > 0 && wk <= W && hk > 0 && hk <= H) {
      w = wk;
      h = hk;
      found = true;
    }
  }
  if (!found) {  // Kornia's fallback: the largest centre part of the image within the ratio range
    const double in_ratio = W / H;
    if (in_ratio < ratio_low_) {
      w = W;
      h = std::floor(std::nearbyint(W / ratio_low_));
    } else if (in_ratio > ratio_high_) {
      h = H;
      w = std::floor(std::nearbyint(H * ratio_high_));
    } else {
      w = W;
      h = H;
    }
  }
  w = std::clamp(w, 1.0, W);
  h = std::clamp(h, 1.0, H);
  v[0] = std::floor(rng.uniform(0, 1) * (W - w + 1));
  v[1] = std::floor(rng.uniform(0, 1) * (H - h + 1));
  v[2] = w;
  v[3] = h;
}

at::Tensor RandomResizedCrop::apply(const at::Tensor& images, const Params& params) const {
  check_apply(*this, images, params);
  const int64_t h = images.size(2), w = images.size(3);
  const double* values = params.values.const_data_ptr<double>();
  std::vector<detail::Mat3> maps;
  for (int64_t i = 0; i < images.size(0); ++i) {
    const double* v = values + i * 4;
    if (!(v[0] >= 0 && v[1] >= 0 && v[2] >= 1 && v[3] >= 1 && v[0] + v[2] <= w && v[1] + v[3] <= h)) {
      throw UsageError("RandomResizedCrop: row " + std::to_string(i) + "'s crop (x " + std::to_string(v[0]) +
                       ", y " + std::to_string(v[1]) + ", width " + std::to_string(v[2]) + ", height " +
                       std::to_string(v[3]) + ") is not inside the " + std::to_string(h) + " x " +
                       std::to_string(w) + " image; draw the parameters for this image size");
    }
    // align_corners=True: the output's first and last pixels sample the crop's.
    const double sx = width_ == 1 ? 0 : (v[2] - 1) / (width_ - 1.0);
    const double sy = height_ == 1 ? 0 : (v[3] - 1) / (height_ - 1.0);
    maps.push_back({sx, 0, v[0], 0, sy, v[1], 0, 0, 1});
  }
  // p is 1 (the constructor's rule): every row is cropped.
  return detail::warp(images, maps, height_, width_, /*projective=*/false);
}

namespace {
[[maybe_unused]] const bool kRegistered = (register_transform("RandomResizedCrop",
                                                              [](const Args& a) {
                                                                return std::make_shared<RandomResizedCrop>(a);
                                                              }),
                                           true);
}

}  // namespace xlaunch::augment
