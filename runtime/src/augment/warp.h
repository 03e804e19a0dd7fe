// Private to the runtime: the one resampling step of the geometric transforms (geometric.h), and
// the two helpers every transform's device path shares (to_device, apply_rows).
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <atomic>
#include <functional>
#include <vector>

namespace xlaunch::augment::detail {

// A 3 x 3 matrix, row-major, float64.
using Mat3 = std::array<double, 9>;

Mat3 multiply(const Mat3& a, const Mat3& b);
// The inverse (adjugate / determinant); a singular matrix is an internal error (the transforms'
// ranges keep them invertible).
Mat3 inverse(const Mat3& m);

// output[b, :, y, x] = bilinear sample of images[b] at source = maps[b] * (x, y, 1) (divided by
// its third coordinate when `projective`), pixel coordinates, zeros outside the image: Kornia's
// warp_affine / warp_perspective (mode bilinear, padding zeros) once the matrix is in pixels.
// images [B, C, H, W] floating point on any device; maps.size() == B; output [B, C, out_h, out_w].
// On the CPU, float and double: a direct kernel; otherwise a grid and at::grid_sampler_2d.
at::Tensor warp(const at::Tensor& images, const std::vector<Mat3>& maps, int64_t out_h, int64_t out_w,
                bool projective);

// The CPU kernel (warp_cpu.cpp), for float and double images on the CPU of at least 2 x 2 and
// fewer than 2^30 pixels (warp_cpu_supports); warp() takes it there unless force_grid_path is set.
bool warp_cpu_supports(const at::Tensor& images);
at::Tensor warp_cpu(const at::Tensor& images, const std::vector<Mat3>& maps, int64_t out_h, int64_t out_w,
                    bool projective);

// For tests: true makes warp() take the grid path on the CPU too, so that both paths can be
// compared with Kornia on a machine without a GPU.
extern std::atomic<bool> force_grid_path;

// A small host tensor on `device` as `dtype`: on CUDA through pinned memory (LibTorch's caching
// host allocator, which reuses the block only after the copy has run), non_blocking, so the
// training thread does not wait for the stream; elsewhere a plain copy. Every transform's
// parameters reach the device this way.
at::Tensor to_device(const at::Tensor& host, c10::Device device, at::ScalarType dtype);

// fn(images[rows where applied]) put back in those rows, the other rows as they were: the result
// of a transform that keeps the image size, computing only the applied rows.
at::Tensor apply_rows(const at::Tensor& images, const at::Tensor& applied,
                      const std::function<at::Tensor(const at::Tensor&, const std::vector<int64_t>&)>& fn);

}  // namespace xlaunch::augment::detail
