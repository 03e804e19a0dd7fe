// The resampling step of the geometric transforms (warp.h): a direct CPU kernel, and the grid path
// for every other device.
#include "augment/warp.h"

#include <ATen/Dispatch.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/affine_grid_generator.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/grid_sampler_2d.h>
#include <ATen/ops/index_copy.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/meshgrid.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/stack.h>
#include <c10/util/Exception.h>

#include <cmath>

#include "augment/rows.h"

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

namespace {

// One output row: every pixel mapped through m, its four neighbours weighted (zeros outside),
// all channels. Coordinates in double: the maps are float64, and Kornia's float32 grid is within
// 1e-5 pixel of them at 224 pixels.
template <typename T>
void warp_row(const T* src, T* dst, int64_t channels, int64_t h, int64_t w, int64_t out_plane, int64_t out_w,
              int64_t y, const Mat3& m, bool projective) {
  const int64_t plane = h * w;
  for (int64_t x = 0; x < out_w; ++x) {
    double sx = m[0] * x + m[1] * y + m[2];
    double sy = m[3] * x + m[4] * y + m[5];
    if (projective) {
      const double z = m[6] * x + m[7] * y + m[8];
      sx /= z;
      sy /= z;
    }
    T* out = dst + y * out_w + x;
    // Far outside (or NaN): all four neighbours are padding.
    if (!(sx > -1 && sx < w && sy > -1 && sy < h)) {
      for (int64_t c = 0; c < channels; ++c) out[c * out_plane] = 0;
      continue;
    }
    const double fx0 = std::floor(sx), fy0 = std::floor(sy);
    const int64_t x0 = static_cast<int64_t>(fx0), y0 = static_cast<int64_t>(fy0);
    const T ax = static_cast<T>(sx - fx0), ay = static_cast<T>(sy - fy0);
    const bool in_x0 = x0 >= 0, in_x1 = x0 + 1 < w, in_y0 = y0 >= 0, in_y1 = y0 + 1 < h;
    const T w00 = (in_y0 && in_x0) ? (1 - ax) * (1 - ay) : T(0);
    const T w01 = (in_y0 && in_x1) ? ax * (1 - ay) : T(0);
    const T w10 = (in_y1 && in_x0) ? (1 - ax) * ay : T(0);
    const T w11 = (in_y1 && in_x1) ? ax * ay : T(0);
    // Out-of-image neighbours have weight 0; their offsets are clamped to stay in memory.
    const int64_t cx0 = in_x0 ? x0 : 0, cx1 = in_x1 ? x0 + 1 : w - 1;
    const int64_t cy0 = in_y0 ? y0 : 0, cy1 = in_y1 ? y0 + 1 : h - 1;
    const int64_t o00 = cy0 * w + cx0, o01 = cy0 * w + cx1, o10 = cy1 * w + cx0, o11 = cy1 * w + cx1;
    for (int64_t c = 0; c < channels; ++c) {
      const T* p = src + c * plane;
      out[c * out_plane] = w00 * p[o00] + w01 * p[o01] + w10 * p[o10] + w11 * p[o11];
    }
  }
}

at::Tensor warp_cpu(const at::Tensor& images, const std::vector<Mat3>& maps, int64_t out_h, int64_t out_w,
                    bool projective) {
  const at::Tensor in = images.contiguous();
  const int64_t batch = in.size(0), channels = in.size(1), h = in.size(2), w = in.size(3);
  at::Tensor out = at::empty({batch, channels, out_h, out_w}, in.options());
  AT_DISPATCH_FLOATING_TYPES(in.scalar_type(), "augment::warp", [&] {
    const scalar_t* src = in.const_data_ptr<scalar_t>();
    scalar_t* dst = out.data_ptr<scalar_t>();
    const int64_t out_plane = out_h * out_w;
    // A grain of rows worth ~16k pixels: small images do not pay a thread hand-off per row.
    const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(out_w, 1));
    parallel_rows(batch * out_h, grain, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t b = r / out_h, y = r % out_h;
        warp_row(src + b * channels * h * w, dst + b * channels * out_plane, channels, h, w, out_plane, out_w, y,
                 maps[b], projective);
      }
    });
  });
  return out;
}

// A small host tensor on `device` as `dtype`: on CUDA through pinned memory (LibTorch's caching
// host allocator, which reuses the block only after the copy has run), non_blocking, so the
// training thread does not wait for the stream; elsewhere a plain copy.
at::Tensor to_device(const at::Tensor& host, c10::Device device, at::ScalarType dtype) {
  if (!device.is_cuda()) return host.to(device, dtype, /*non_blocking=*/false, /*copy=*/true);
  at::Tensor pinned = at::empty(host.sizes(), host.options().dtype(dtype).pinned_memory(true));
  pinned.copy_(host);
  return pinned.to(device, dtype, /*non_blocking=*/true);
}

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
    grid = (p.narrow(2, 0, 2) / p.narrow(2, 2, 1)).view({batch, out_h, out_w, 2});
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
  const bool cpu_kernel = images.device().is_cpu() && !force_grid_path.load() &&
                          (images.scalar_type() == at::kFloat || images.scalar_type() == at::kDouble);
  return cpu_kernel ? warp_cpu(images, maps, out_h, out_w, projective)
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
