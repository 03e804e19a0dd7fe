// RandomPerspective (geometric.h): Kornia's PerspectiveGenerator ("basic") and its closed-form
// get_perspective_transform.
#include "augment/warp.h"
#include "xlaunch/augment/geometric.h"

namespace xlaunch::augment {

RandomPerspective::RandomPerspective(const Args& args) {
  ArgReader read("RandomPerspective", args, {"distortion_scale"});
  options_ = read.options(0.5);
  distortion_scale_ = read.number("distortion_scale", 0.5, 0, 1);
}

std::vector<std::string> RandomPerspective::columns() const {
  return {"end_x0", "end_y0", "end_x1", "end_y1", "end_x2", "end_y2", "end_x3", "end_y3"};
}

namespace {

// Kornia's start points: the corners, clockwise from the top left; an axis of one pixel gets the
// end 1 and no offset (its _source_end_and_extent), so the homography stays regular.
void start_points(int64_t height, int64_t width, double* p, double* extent_x, double* extent_y) {
  const double xe = width == 1 ? 1 : width - 1.0, ye = height == 1 ? 1 : height - 1.0;
  *extent_x = width == 1 ? 0 : static_cast<double>(width);
  *extent_y = height == 1 ? 0 : static_cast<double>(height);
  const double corners[8] = {0, 0, xe, 0, xe, ye, 0, ye};
  std::copy(corners, corners + 8, p);
}

// Kornia's _unit_square_to_quad: the homography taking the unit square's corners to the quad's.
detail::Mat3 unit_square_to_quad(const double* q) {
  const double x0 = q[0], y0 = q[1], x1 = q[2], y1 = q[3], x2 = q[4], y2 = q[5], x3 = q[6], y3 = q[7];
  const double dx1 = x1 - x2, dx2 = x3 - x2, sx = x0 - x1 + x2 - x3;
  const double dy1 = y1 - y2, dy2 = y3 - y2, sy = y0 - y1 + y2 - y3;
  const double denom = dx1 * dy2 - dy1 * dx2;
  const double a31 = (sx * dy2 - sy * dx2) / denom, a32 = (dx1 * sy - dy1 * sx) / denom;
  return {x1 - x0 + a31 * x1, x3 - x0 + a32 * x3, x0, y1 - y0 + a31 * y1, y3 - y0 + a32 * y3, y0, a31, a32, 1};
}

}  // namespace

void RandomPerspective::sample(Rng& rng, int64_t height, int64_t width, double* v) const {
  double extent_x = 0, extent_y = 0;
  start_points(height, width, v, &extent_x, &extent_y);
  const double fx = distortion_scale_ * extent_x / 2, fy = distortion_scale_ * extent_y / 2;
  static constexpr double kSign[8] = {1, 1, -1, 1, -1, -1, 1, -1};
  for (int k = 0; k < 8; ++k) v[k] += (k % 2 == 0 ? fx : fy) * rng.uniform(0, 1) * kSign[k];
}

at::Tensor RandomPerspective::apply(const at::Tensor& images, const Params& params) const {
  check_apply(*this, images, params);
  const int64_t h = images.size(2), w = images.size(3);
  double start[8], ex = 0, ey = 0;
  start_points(h, w, start, &ex, &ey);
  const detail::Mat3 from_start = detail::inverse(unit_square_to_quad(start));
  const double* values = params.values.const_data_ptr<double>();
  return detail::apply_rows(images, params.applied, [&](const at::Tensor& rows, const std::vector<int64_t>& index) {
    std::vector<detail::Mat3> maps;
    for (int64_t i : index) {
      // start -> end; the warp needs end -> start.
      maps.push_back(detail::inverse(detail::multiply(unit_square_to_quad(values + i * 8), from_start)));
    }
    return detail::warp(rows, maps, h, w, /*projective=*/true);
  });
}

namespace {
[[maybe_unused]] const bool kRegistered = (register_transform("RandomPerspective",
                                                              [](const Args& a) {
                                                                return std::make_shared<RandomPerspective>(a);
                                                              }),
                                           true);
}

}  // namespace xlaunch::augment
