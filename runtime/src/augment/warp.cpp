// The resampling step of the geometric transforms (warp.h): the choice between the CPU kernel
// (warp_cpu.cpp) and the grid path every other device takes, and the grid path.
#include "augment/warp.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/affine_grid_generator.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/grid_sampler_2d.h>
#include <ATen/ops/index_copy.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/meshgrid.h>
#include <ATen/ops/nan_to_num.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/stack.h>
#include <c10/util/Exception.h>

#include <cmath>


namespace xlaunch::augment::detail {

std::atomic<bool> force_grid_path{false};

Mat3 multiply(const Mat3& a, const Mat3& b) {
  Mat3 c{};
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) {
      c[i * 3 + j] = a[i * 3] * b[j] + a[i * 3 + 1] * b[3 + j] + a[i * 3 + 2] * b[6 + j];
    }
  }
  return c;
}

Mat3 inverse(const Mat3& m) {
  const double a = m[0], b = m[1], c = m[2], d = m[3], e = m[4], f = m[5], g = m[6], h = m[7], i = m[8];
  const double A = e * i - f * h, B = -(d * i - f * g), C = d * h - e * g;
  const double det = a * A + b * B + c * C;
  TORCH_INTERNAL_ASSERT(det != 0 && std::isfinite(det), "augment: a singular transform matrix");
  const double r = 1.0 / det;
  return {A * r, -(b * i - c * h) * r, (b * f - c * e) * r,
          B * r, (a * i - c * g) * r,  -(a * f - c * d) * r,
          C * r, -(a * h - b * g) * r, (a * e - b * d) * r};
}

at::Tensor to_device(const at::Tensor& host, c10::Device device, at::ScalarType dtype) {
  if (!device.is_cuda()) return host.to(device, dtype, /*non_blocking=*/false, /*copy=*/true);
  at::Tensor pinned = at::empty(host.sizes(), host.options().dtype(dtype).pinned_memory(true));
  pinned.copy_(host);
  return pinned.to(device, dtype, /*non_blocking=*/true);
}

namespace {

// Pixel coordinates -> grid_sample's normalised ones (align_corners false: the pixel centres of a
// size-n axis are at (2k + 1) / n - 1), and back.
Mat3 to_normalised(int64_t h, int64_t w) { return {2.0 / w, 0, 1.0 / w - 1, 0, 2.0 / h, 1.0 / h - 1, 0, 0, 1}; }
Mat3 from_normalised(int64_t h, int64_t w) { return {w / 2.0, 0, (w - 1) / 2.0, 0, h / 2.0, (h - 1) / 2.0, 0, 0, 1}; }

at::Tensor warp_grid(const at::Tensor& images, const std::vector<Mat3>& maps, int64_t out_h, int64_t out_w,
                     bool projective) {
  const int64_t batch = images.size(0);
  // The maps in normalised coordinates: output grid point -> input grid point.
  std::vector<double> host(batch * 9);
  const Mat3 n_in = to_normalised(images.size(2), images.size(3));
  const Mat3 n_out_inv = from_normalised(out_h, out_w);
  for (int64_t b = 0; b < batch; ++b) {
    const Mat3 g = multiply(n_in, multiply(maps[b], n_out_inv));
    std::copy(g.begin(), g.end(), host.begin() + b * 9);
  }
  const at::Tensor theta =
      to_device(at::from_blob(host.data(), {batch, 3, 3}, at::kDouble), images.device(), images.scalar_type());
  at::Tensor grid;
  if (!projective) {
    grid = at::affine_grid_generator(theta.narrow(1, 0, 2), {batch, images.size(1), out_h, out_w},
                                     /*align_corners=*/false);
  } else {
    const auto opt = images.options();
    const at::Tensor xs = (at::arange(out_w, opt) * 2 + 1) / static_cast<double>(out_w) - 1;
    const at::Tensor ys = (at::arange(out_h, opt) * 2 + 1) / static_cast<double>(out_h) - 1;
    const std::vector<at::Tensor> yx = at::meshgrid({ys, xs}, "ij");
    const at::Tensor base = at::stack({yx[1], yx[0], at::ones_like(yx[0])}, -1).view({1, out_h * out_w, 3});
    const at::Tensor p = at::matmul(base, theta.transpose(1, 2));  // [B, HW, 3]
    // Where the third coordinate is 0 the position is at infinity: moved to -2, outside the image
    // (every neighbour padding, as the CPU kernel does), not handed to grid_sample as inf or NaN.
    grid = at::nan_to_num(p.narrow(2, 0, 2) / p.narrow(2, 2, 1), -2.0, -2.0, -2.0).view({batch, out_h, out_w, 2});
  }
  return at::grid_sampler_2d(images, grid, /*interpolation_mode=bilinear*/ 0, /*padding_mode=zeros*/ 0,
                             /*align_corners=*/false);
}

}  // namespace

at::Tensor warp(const at::Tensor& images, const std::vector<Mat3>& maps, int64_t out_h, int64_t out_w,
                bool projective) {
  TORCH_INTERNAL_ASSERT(static_cast<int64_t>(maps.size()) == images.size(0));
  // Half and bfloat16: the grid in float32 (an 8-bit mantissa puts 224-pixel coordinates 0.5 px off).
  if (images.scalar_type() == at::kHalf || images.scalar_type() == at::kBFloat16)
    return warp(images.to(at::kFloat), maps, out_h, out_w, projective).to(images.scalar_type());
  return !force_grid_path.load() && warp_cpu_supports(images) ? warp_cpu(images, maps, out_h, out_w, projective)
                    : warp_grid(images, maps, out_h, out_w, projective);
}

at::Tensor apply_rows(const at::Tensor& images, const at::Tensor& applied,
                      const std::function<at::Tensor(const at::Tensor&, const std::vector<int64_t>&)>& fn) {
  const bool* a = applied.const_data_ptr<bool>();
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < applied.numel(); ++i) {
    if (a[i]) rows.push_back(i);
  }
  if (static_cast<int64_t>(rows.size()) == images.size(0)) return fn(images, rows);
  if (rows.empty()) return images;
  const at::Tensor index =
      to_device(at::from_blob(rows.data(), {static_cast<int64_t>(rows.size())}, at::kLong), images.device(), at::kLong);
  return images.index_copy(0, index, fn(images.index_select(0, index), rows));
}

}  // namespace xlaunch::augment::detail
