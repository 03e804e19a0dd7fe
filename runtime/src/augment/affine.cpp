// RandomAffine (geometric.h): Kornia's AffineGenerator draws and get_affine_matrix2d.
#include <cmath>

#include "augment/warp.h"
#include "xlaunch/augment/geometric.h"

namespace xlaunch::augment {

RandomAffine::RandomAffine(const Args& args) {
  ArgReader read("RandomAffine", args, {"degrees", "translate", "scale", "shear"});
  options_ = read.options(0.5);
  if (!read.has("degrees")) read.fail("degrees", {}, "required (Kornia has no default): give v or (min, max)");
  degrees_ = read.symmetric("degrees", {}, -360, 360);
  const std::vector<double> t = read.values("translate", {0, 0}, 2, 2);
  for (double f : t) {
    if (!(f >= 0 && f <= 1)) read.fail("translate", t, "give (a, b), fractions of the width and height in [0, 1]");
  }
  translate_x_ = {-t[0], t[0]};
  translate_y_ = {-t[1], t[1]};
  const std::vector<double> s = read.values("scale", {1, 1}, 2, 4);
  if (s.size() == 3) read.fail("scale", s, "give (min, max) or (x_min, x_max, y_min, y_max)");
  const double inf = HUGE_VAL;
  scale_x_ = read.pair("scale", {s[0], s[1]}, 0, inf);
  scale_y_own_ = s.size() == 4;
  scale_y_ = scale_y_own_ ? read.pair("scale[2:4]", {s[2], s[3]}, 0, inf) : scale_x_;
  // A zero factor would squash the image to a line: a matrix with no inverse to sample through.
  if (!(scale_x_.low > 0 && scale_y_.low > 0))
    read.fail("scale", s, "give factors > 0: (min, max) or (x_min, x_max, y_min, y_max) with 0 < min <= max");
  const std::vector<double> sh = read.values("shear", {0}, 1, 4);
  if (sh.size() == 3) read.fail("shear", sh, "give v, (x_min, x_max) or (x_min, x_max, y_min, y_max)");
  if (sh.size() == 1) {
    shear_x_ = read.symmetric("shear", sh, -360, 360);
  } else {
    shear_x_ = read.pair("shear", {sh[0], sh[1]}, -360, 360);
  }
  shear_y_ = sh.size() == 4 ? read.pair("shear[2:4]", {sh[2], sh[3]}, -360, 360) : Range{0, 0};
}

std::vector<std::string> RandomAffine::columns() const {
  return {"angle", "translate_x", "translate_y", "scale_x", "scale_y", "shear_x", "shear_y"};
}

void RandomAffine::sample(Rng& rng, int64_t height, int64_t width, double* v) const {
  v[0] = rng.uniform(degrees_.low, degrees_.high);
  v[3] = rng.uniform(scale_x_.low, scale_x_.high);
  const double scale_y = rng.uniform(scale_y_.low, scale_y_.high);
  v[4] = scale_y_own_ ? scale_y : v[3];
  v[1] = rng.uniform(translate_x_.low, translate_x_.high) * static_cast<double>(width);
  v[2] = rng.uniform(translate_y_.low, translate_y_.high) * static_cast<double>(height);
  v[5] = rng.uniform(shear_x_.low, shear_x_.high);
  v[6] = rng.uniform(shear_y_.low, shear_y_.high);
}

namespace {

// Kornia's get_affine_matrix2d for one row of values, in pixels.
detail::Mat3 affine_matrix(const double* v, int64_t height, int64_t width) {
  constexpr double kRad = M_PI / 180.0;
  const double cx = width / 2.0 - 0.5, cy = height / 2.0 - 0.5;
  // get_rotation_matrix2d(center, -angle, scale): T(c) R S T(-c), with R = [[cos, -sin], [sin, cos]]
  // of the angle (Kornia's angle_to_rotation_matrix of -angle).
  const double cos_a = std::cos(v[0] * kRad), sin_a = std::sin(v[0] * kRad);
  const double sx = v[3], sy = v[4];
  const double a = cos_a * sx, b = -sin_a * sy, d = sin_a * sx, e = cos_a * sy;
  const detail::Mat3 rotate = {a, b, cx - a * cx - b * cy + v[1], d, e, cy - d * cx - e * cy + v[2], 0, 0, 1};
  const double tx = std::tan(v[5] * kRad), ty = std::tan(v[6] * kRad);
  const detail::Mat3 shear = {1, -tx, tx * cy, -ty, 1 + tx * ty, ty * (cx - tx * cy), 0, 0, 1};
  return detail::multiply(rotate, shear);
}

}  // namespace

at::Tensor RandomAffine::apply(const at::Tensor& images, const Params& params) const {
  check_apply(*this, images, params);
  const int64_t h = images.size(2), w = images.size(3);
  const double* values = params.values.const_data_ptr<double>();
  return detail::apply_rows(images, params.applied, [&](const at::Tensor& rows, const std::vector<int64_t>& index) {
    std::vector<detail::Mat3> maps;
    for (int64_t i : index) maps.push_back(detail::inverse(affine_matrix(values + i * 7, h, w)));
    return detail::warp(rows, maps, h, w, /*projective=*/false);
  });
}

namespace {
[[maybe_unused]] const bool kRegistered =
    (register_transform("RandomAffine", [](const Args& a) { return std::make_shared<RandomAffine>(a); }), true);
}

}  // namespace xlaunch::augment
