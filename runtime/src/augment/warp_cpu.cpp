// The CPU kernel of the geometric transforms' resampling step (warp.h): bilinear, zeros padding,
// the source position of every output pixel mapped through a 3 x 3 matrix in pixel coordinates.
//
// Each output row is cut into blocks of kBlock pixels, and each block is done in four loops. The
// first three have no branches, and the compiler turns them into vector code: the source positions
// (float64, as the matrices are: the float32 grid Kornia builds is within 1e-5 pixel of them at 224
// pixels), their whole and fractional parts, and for each pixel a 2 x 2 square of the image with a
// weight per corner (a neighbour outside the image gets weight 0). The last sums each pixel's
// square, all channels at once (float RGB in 4-vectors). A pixel's result depends only on its own
// position, never on the block, the thread or the batch it is computed in. Measured against the
// per-pixel loop it replaces (one thread, 32 x 3 x 224 x 224, 15 degree rotations): about 2x.
#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "augment/rows.h"
#include "augment/warp.h"

namespace xlaunch::augment::detail {

namespace {

constexpr int kBlock = 64;

struct Plane {
  int64_t channels, h, w, out_w, out_plane;
};

// Step 4 for float RGB, in 4-vectors (GCC's vector extensions: SSE on any x86-64, and on other
// machines what they have): a channel's square is two 8-byte loads, its two rows, multiplied by the
// pixel's 4 weights; the three channels' sums come out of one transposition.
using F4 = float __attribute__((vector_size(16)));
using U2 = uint64_t __attribute__((vector_size(16)));
using I4 = int32_t __attribute__((vector_size(16)));

inline F4 square(const float* q, int64_t w) {
  uint64_t top, bottom;
  std::memcpy(&top, q, 8);
  std::memcpy(&bottom, q + w, 8);
  const U2 rows = {top, bottom};
  return reinterpret_cast<F4>(rows);
}

inline void sum_squares_rgb(const float* src, int64_t plane, int64_t w, const int32_t* corner, const float* weights,
                            int n, float* out, int64_t out_plane) {
  const float *r = src, *g = src + plane, *b = src + 2 * plane;
  float *ro = out, *go = out + out_plane, *bo = out + 2 * out_plane;
  for (int i = 0; i < n; ++i) {
    F4 wi;
    std::memcpy(&wi, weights + 4 * i, sizeof wi);
    const int32_t at = corner[i];
    const F4 vr = square(r + at, w) * wi, vg = square(g + at, w) * wi, vb = square(b + at, w) * wi;
    // [r0 + r2, r1 + r3, g0 + g2, g1 + g3] and [b0 + b2, b1 + b3, ..], then their pairs summed.
    const F4 rg = __builtin_shuffle(vr, vg, I4{0, 1, 4, 5}) + __builtin_shuffle(vr, vg, I4{2, 3, 6, 7});
    const F4 bb = __builtin_shuffle(vb, I4{0, 1, 0, 1}) + __builtin_shuffle(vb, I4{2, 3, 2, 3});
    const F4 sums = __builtin_shuffle(rg, bb, I4{0, 2, 4, 6}) + __builtin_shuffle(rg, bb, I4{1, 3, 5, 7});
    ro[i] = sums[0];
    go[i] = sums[1];
    bo[i] = sums[2];
  }
}

// One block of an output row: pixels x0 .. x0 + n - 1 of row y, every channel (C of them, or
// p.channels when C is 0).
template <typename T, int C>
inline void warp_block(const T* src, T* dst, const Plane& p, int64_t y, int64_t x0, int n, const Mat3& m,
                       bool projective) {
  // 1. Source positions. (The loop counters are int: AVX2 converts int32 to double, not int64.)
  double sx[kBlock], sy[kBlock];
  const double bx = m[1] * y + m[2], by = m[4] * y + m[5], bz = m[7] * y + m[8];
  const double xs = static_cast<double>(x0);
  if (projective) {
    for (int i = 0; i < n; ++i) {
      const double x = xs + i;
      const double z = m[6] * x + bz;
      sx[i] = (m[0] * x + bx) / z;
      sy[i] = (m[3] * x + by) / z;
    }
  } else {
    for (int i = 0; i < n; ++i) {
      const double x = xs + i;
      sx[i] = m[0] * x + bx;
      sy[i] = m[3] * x + by;
    }
  }
  // 2. Whole and fractional parts. A position beyond [-1, size] is moved to -1 or size, and NaN to
  // -1 (std::max(-1, NaN) is -1: the NaN goes second), where both of its neighbours are outside,
  // as they were, and the conversions stay in range.
  const double fw = static_cast<double>(p.w), fh = static_cast<double>(p.h);
  int32_t ixs[kBlock], iys[kBlock];
  T axs[kBlock], ays[kBlock];
  for (int i = 0; i < n; ++i) {
    const double cx = std::max(-1.0, std::min(sx[i], fw)), cy = std::max(-1.0, std::min(sy[i], fh));
    const double fx = std::floor(cx), fy = std::floor(cy);
    ixs[i] = static_cast<int32_t>(fx);
    iys[i] = static_cast<int32_t>(fy);
    axs[i] = static_cast<T>(cx - fx);
    ays[i] = static_cast<T>(cy - fy);
  }
  // 3. The four neighbours' weights, and where they are: the 2 x 2 square of pixels from (px, py)
  // to (px + 1, py + 1), its corner clamped so that the square lies in the image (the image is at
  // least 2 x 2). Where the position is inside, the square is its four neighbours; at an edge it
  // holds the neighbours that are in the image, under their weights, and the others' weights go
  // to 0; beyond it every weight is 0. Stored per pixel as 4 weights in a row (a 4-vector).
  // `inside`: the position is within (-1, size) on both axes, so some neighbour is in the image;
  // the others are set to 0 in step 5, not left as 0 x pixel (NaN beside an inf pixel).
  const int32_t w = static_cast<int32_t>(p.w), h = static_cast<int32_t>(p.h);
  alignas(16) T weights[kBlock * 4];
  int32_t corner[kBlock], inside[kBlock];
  int32_t outside = 0;
  for (int i = 0; i < n; ++i) {
    const int32_t ix = ixs[i], iy = iys[i];
    const T ax = axs[i], ay = ays[i];
    const bool in_x0 = ix >= 0 && ix < w, in_x1 = ix + 1 < w, in_y0 = iy >= 0 && iy < h, in_y1 = iy + 1 < h;
    const T wx0 = in_x0 ? T(1) - ax : T(0), wx1 = in_x1 ? ax : T(0);
    const T wy0 = in_y0 ? T(1) - ay : T(0), wy1 = in_y1 ? ay : T(0);
    const int32_t px = std::min(std::max(ix, 0), w - 2), py = std::min(std::max(iy, 0), h - 2);
    // The square's left column is the left neighbour (px == ix), the right one (ix == -1) or
    // neither (ix >= w - 1); its right column is the right neighbour, the left one (ix == w - 1)
    // or neither. Rows alike.
    const T left = px == ix ? wx0 : (px == ix + 1 ? wx1 : T(0));
    const T right = px == ix ? wx1 : (px + 1 == ix ? wx0 : T(0));
    const T top = py == iy ? wy0 : (py == iy + 1 ? wy1 : T(0));
    const T bottom = py == iy ? wy1 : (py + 1 == iy ? wy0 : T(0));
    weights[4 * i] = left * top;
    weights[4 * i + 1] = right * top;
    weights[4 * i + 2] = left * bottom;
    weights[4 * i + 3] = right * bottom;
    corner[i] = py * w + px;
    inside[i] = (ix >= 0 || ax > T(0)) && ix < w && (iy >= 0 || ay > T(0)) && iy < h;
    outside += 1 - inside[i];
  }
  // 4. Each pixel's weighted sum of its square, all channels: its corner and weights read once.
  const int64_t plane = p.h * p.w, channels = C > 0 ? C : p.channels;
  T* out = dst + y * p.out_w + x0;
  if constexpr (std::is_same_v<T, float> && C == 3) {
    sum_squares_rgb(src, plane, p.w, corner, weights, n, out, p.out_plane);
  } else {
    for (int i = 0; i < n; ++i) {
      const T* wi = weights + 4 * i;
      for (int64_t c = 0; c < channels; ++c) {
        const T* q = src + c * plane + corner[i];
        out[c * p.out_plane + i] = wi[0] * q[0] + wi[1] * q[1] + wi[2] * q[p.w] + wi[3] * q[p.w + 1];
      }
    }
  }
  // 5. Positions outside: 0 (only in blocks that reach beyond the image).
  if (outside > 0) {
    for (int64_t c = 0; c < channels; ++c) {
      T* o = out + c * p.out_plane;
      for (int i = 0; i < n; ++i) o[i] = inside[i] ? o[i] : T(0);
    }
  }
}

template <typename T, int C>
inline void warp_rows_of(const T* src, T* dst, const Plane& p, int64_t out_h, int64_t begin, int64_t end,
                         const Mat3* maps, bool projective) {
  const int64_t in_image = p.channels * p.h * p.w, out_image = p.channels * p.out_plane;
  for (int64_t r = begin; r < end; ++r) {
    const int64_t b = r / out_h, y = r % out_h;
    for (int64_t x = 0; x < p.out_w; x += kBlock) {
      warp_block<T, C>(src + b * in_image, dst + b * out_image, p, y, x,
                       static_cast<int>(std::min<int64_t>(kBlock, p.out_w - x)), maps[b], projective);
    }
  }
}

// RGB and gray images with the channel loop unrolled, any other count without.
template <typename T>
inline void warp_rows(const T* src, T* dst, const Plane& p, int64_t out_h, int64_t begin, int64_t end,
                      const Mat3* maps, bool projective) {
  if (p.channels == 3) {
    warp_rows_of<T, 3>(src, dst, p, out_h, begin, end, maps, projective);
  } else if (p.channels == 1) {
    warp_rows_of<T, 1>(src, dst, p, out_h, begin, end, maps, projective);
  } else {
    warp_rows_of<T, 0>(src, dst, p, out_h, begin, end, maps, projective);
  }
}

// Compiled for AVX2 and for the baseline (XLAUNCH_AUGMENT_CLONES, rows.h).
XLAUNCH_AUGMENT_CLONES void warp_rows_float(const float* src, float* dst, const Plane& p, int64_t out_h, int64_t begin,
                                         int64_t end, const Mat3* maps, bool projective) {
  warp_rows(src, dst, p, out_h, begin, end, maps, projective);
}

XLAUNCH_AUGMENT_CLONES void warp_rows_double(const double* src, double* dst, const Plane& p, int64_t out_h,
                                          int64_t begin, int64_t end, const Mat3* maps, bool projective) {
  warp_rows(src, dst, p, out_h, begin, end, maps, projective);
}

void warp_rows_typed(const float* src, float* dst, const Plane& p, int64_t out_h, int64_t begin, int64_t end,
                     const Mat3* maps, bool projective) {
  warp_rows_float(src, dst, p, out_h, begin, end, maps, projective);
}

void warp_rows_typed(const double* src, double* dst, const Plane& p, int64_t out_h, int64_t begin,
                     int64_t end, const Mat3* maps, bool projective) {
  warp_rows_double(src, dst, p, out_h, begin, end, maps, projective);
}

}  // namespace

bool warp_cpu_supports(const at::Tensor& images) {
  // Offsets within a channel plane are int32 (planes of fewer than 2^30 pixels), and each pixel's
  // square of neighbours must fit in the image (at least 2 x 2).
  return images.device().is_cpu() && (images.scalar_type() == at::kFloat || images.scalar_type() == at::kDouble) &&
         images.size(2) >= 2 && images.size(3) >= 2 && images.size(2) * images.size(3) < (int64_t{1} << 30);
}

at::Tensor warp_cpu(const at::Tensor& images, const std::vector<Mat3>& maps, int64_t out_h, int64_t out_w,
                    bool projective) {
  const at::Tensor in = images.contiguous();
  const int64_t batch = in.size(0);
  const Plane p{in.size(1), in.size(2), in.size(3), out_w, out_h * out_w};
  at::Tensor out = at::empty({batch, p.channels, out_h, out_w}, in.options());
  AT_DISPATCH_FLOATING_TYPES(in.scalar_type(), "augment::warp", [&] {
    const scalar_t* src = in.const_data_ptr<scalar_t>();
    scalar_t* dst = out.data_ptr<scalar_t>();
    // A grain of rows worth ~16k pixels: small images do not pay a thread hand-off per row.
    const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(out_w, 1));
    parallel_rows(batch * out_h, grain, [&](int64_t begin, int64_t end) {
      warp_rows_typed(src, dst, p, out_h, begin, end, maps.data(), projective);
    });
  });
  return out;
}

}  // namespace xlaunch::augment::detail
