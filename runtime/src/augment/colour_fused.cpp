// ColorJitter fused on the CPU (colour_kernels.h). Kornia runs each step as a handful of whole-
// batch tensor ops (the hue step alone some forty), each a pass over memory; here each image goes
// through its steps in blocks of kBlock pixels that stay in L1: every step is a loop over the
// block (which the compiler vectorises), and the image is read once and written once. The contrast
// step needs the mean of the image as the steps before it leave it, so an image whose order
// has contrast after other steps takes two passes: the steps before contrast (summing the
// grayscale on the way, the result written out), then contrast and the steps after it, in place.
//
// The arithmetic is Kornia's, operation for operation in the image's dtype (colour_aten.cpp has
// the same steps as tensor ops), with three differences within rounding: the contrast mean is
// summed in double, the hue is kept in turns instead of radians, and hsv_to_rgb's table of
// sectors is one formula (hue() below).
#include <ATen/ops/empty_like.h>

#include <algorithm>
#include <cstring>

#include "augment/colour_kernels.h"
#include "augment/rows.h"

namespace xlaunch::augment::detail {
namespace {

constexpr int kBlock = 256;

template <typename T>
inline T clamp01(T x) {
  return std::min(std::max(x, T(0)), T(1));
}

// floor for |x| < 2^31, through an integer conversion and a select (which vectorise on any
// x86-64, where std::floor needs SSE4.1).
template <typename T>
inline T floor_small(T x) {
  const T t = static_cast<T>(static_cast<int32_t>(x));
  return t > x ? t - 1 : t;
}

// A block of pixels, channel-planar, and the image's channel count (1 or 3).
template <typename T>
struct Block {
  T x[3][kBlock];
  int channels;
  int n;
};

template <typename T>
void load(Block<T>& b, const T* image, int64_t hw, int64_t at) {
  for (int c = 0; c < b.channels; ++c) {
    const T* src = image + c * hw + at;
    T* dst = b.x[c];
    for (int i = 0; i < b.n; ++i) dst[i] = clamp01(src[i]);
  }
}

template <typename T>
void store(const Block<T>& b, T* image, int64_t hw, int64_t at, bool clamp) {
  for (int c = 0; c < b.channels; ++c) {
    T* dst = image + c * hw + at;
    const T* src = b.x[c];
    if (clamp) {
      for (int i = 0; i < b.n; ++i) dst[i] = clamp01(src[i]);
    } else {
      std::memcpy(dst, src, sizeof(T) * b.n);
    }
  }
}

// Kornia's rgb_to_grayscale weights, rounded to T as Kornia's weight tensor is.
template <typename T>
inline T gray_of(T r, T g, T b) {
  return r * T(0.299) + g * T(0.587) + b * T(0.114);
}

// The sum of the block's grayscale (of its one channel for a gray image).
template <typename T>
double gray_sum(const Block<T>& b) {
  T sum = 0;
  if (b.channels == 1) {
    for (int i = 0; i < b.n; ++i) sum += b.x[0][i];
  } else {
    for (int i = 0; i < b.n; ++i) sum += gray_of(b.x[0][i], b.x[1][i], b.x[2][i]);
  }
  return sum;
}

template <typename T>
void brightness(Block<T>& b, T f) {
  for (int c = 0; c < b.channels; ++c) {
    for (int i = 0; i < b.n; ++i) b.x[c][i] = clamp01(b.x[c][i] * f);
  }
}

// bias: the mean's share, mean * (1 - f), as Kornia computes it before adding.
template <typename T>
void contrast(Block<T>& b, T f, T bias) {
  for (int c = 0; c < b.channels; ++c) {
    for (int i = 0; i < b.n; ++i) b.x[c][i] = clamp01(b.x[c][i] * f + bias);
  }
}

template <typename T>
void saturation(Block<T>& b, T f) {
  const T keep = 1 - f;
  T* r = b.x[0];
  T* g = b.x[1];
  T* bl = b.x[2];
  for (int i = 0; i < b.n; ++i) {
    const T gray = keep * gray_of(r[i], g[i], bl[i]);
    r[i] = clamp01(gray + f * r[i]);
    g[i] = clamp01(gray + f * g[i]);
    bl[i] = clamp01(gray + f * bl[i]);
  }
}

// Kornia's rgb_to_hsv, the shift by f turns, and hsv_to_rgb, per pixel, without branches (so
// that the loop vectorises): every candidate is computed and selected. hsv_to_rgb's table of
// sectors is written as v - v s clamp(min(k, 4 - k), 0, 1) with k = (n + 6h) mod 6, n = 5, 3, 1
// for r, g, b: the same values (v, t = v(1 - (1 - f)s), p = v(1 - s), q = v(1 - f s), by sector),
// rounded in another order.
template <typename T>
void hue(Block<T>& b, T f) {
  T* __restrict r = b.x[0];
  T* __restrict g = b.x[1];
  T* __restrict bl = b.x[2];
  for (int i = 0; i < b.n; ++i) {
    const T R = r[i], G = g[i], B = bl[i];
    const T v = std::max(std::max(R, G), B);
    const T delta = v - std::min(std::min(R, G), B);
    const T s = delta / (v == 0 ? T(1) : v + T(1e-8));
    const T d = delta == 0 ? T(1) : delta;
    const T rc = v - R, gc = v - G, bc = v - B;
    const T h_r = bc - gc, h_g = (rc - bc) + 2 * d, h_b = (gc - rc) + 4 * d;
    const bool r_max = (R >= G) & (R >= B);
    T h = r_max ? h_r : (G >= B ? h_g : h_b);
    h = h / d / 6;
    h = h - floor_small(h);
    h = h + f;
    h = h - floor_small(h);
    h = h >= 1 ? T(0) : h;  // a tiny negative sum rounds up to 1 itself
    const T h6 = h * 6, vs = v * s;
    T k[3] = {5 + h6, 3 + h6, 1 + h6};
    T out[3];
    for (int c = 0; c < 3; ++c) {
      const T kc = k[c] >= 6 ? k[c] - 6 : k[c];
      out[c] = v - vs * std::min(std::max(std::min(kc, 4 - kc), T(0)), T(1));
    }
    r[i] = out[0];
    g[i] = out[1];
    bl[i] = out[2];
  }
}

// One image's factors, in T, and the steps it runs: its order without the neutral steps (and
// without saturation and hue for a gray image).
template <typename T>
struct Plan {
  T factor[4];
  int steps[4];
  int count = 0;
  int contrast_at = -1;  // its index in steps, or -1
};

template <typename T>
Plan<T> plan_of(const double* values, int channels) {
  Plan<T> plan;
  for (int k = 0; k < 4; ++k) plan.factor[k] = static_cast<T>(values[k]);
  for (int k = 0; k < 4; ++k) {
    const int step = static_cast<int>(values[kOrder + k]);
    if (values[step] == kNeutral[step] || (channels == 1 && step >= kSaturation)) continue;
    if (step == kContrast) plan.contrast_at = plan.count;
    plan.steps[plan.count++] = step;
  }
  return plan;
}

template <typename T>
void run(Block<T>& b, const Plan<T>& plan, int from, int to, T contrast_bias) {
  for (int k = from; k < to; ++k) {
    const T f = plan.factor[plan.steps[k]];
    switch (plan.steps[k]) {
      case kBrightness: brightness(b, f); break;
      case kContrast: contrast(b, f, contrast_bias); break;
      case kSaturation: saturation(b, f); break;
      default: hue(b, f); break;
    }
  }
}

template <typename T>
void jitter_image(const T* in, T* out, int64_t hw, int channels, const double* values) {
  const Plan<T> plan = plan_of<T>(values, channels);
  Block<T> b;
  b.channels = channels;
  const auto blocks = [&](auto&& body) {
    for (int64_t at = 0; at < hw; at += kBlock) {
      b.n = static_cast<int>(std::min<int64_t>(kBlock, hw - at));
      body(at);
    }
  };
  if (plan.contrast_at < 0) {
    blocks([&](int64_t at) {
      load(b, in, hw, at);
      run(b, plan, 0, plan.count, T(0));
      store(b, out, hw, at, true);
    });
    return;
  }
  // Pass 1: the steps before contrast, and the grayscale mean they leave.
  const bool before = plan.contrast_at > 0;
  double sum = 0;
  blocks([&](int64_t at) {
    load(b, in, hw, at);
    run(b, plan, 0, plan.contrast_at, T(0));
    sum += gray_sum(b);
    if (before) store(b, out, hw, at, false);
  });
  const T f = plan.factor[kContrast];
  const T bias = static_cast<T>(sum / static_cast<double>(hw)) * (1 - f);
  // Pass 2: contrast and the steps after it.
  blocks([&](int64_t at) {
    load(b, before ? out : in, hw, at);
    run(b, plan, plan.contrast_at, plan.count, bias);
    store(b, out, hw, at, true);
  });
}

// One image of each dtype, compiled for AVX2 and for the baseline (XLAUNCH_AUGMENT_CLONES, rows.h).
XLAUNCH_AUGMENT_CLONES void jitter_float(const float* in, float* out, int64_t hw, int channels, const double* values) {
  jitter_image(in, out, hw, channels, values);
}

XLAUNCH_AUGMENT_CLONES void jitter_double(const double* in, double* out, int64_t hw, int channels,
                                         const double* values) {
  jitter_image(in, out, hw, channels, values);
}

void jitter_one(const float* in, float* out, int64_t hw, int channels, const double* values) {
  jitter_float(in, out, hw, channels, values);
}

void jitter_one(const double* in, double* out, int64_t hw, int channels, const double* values) {
  jitter_double(in, out, hw, channels, values);
}

template <typename T>
void jitter_batch(const at::Tensor& images, const at::Tensor& out, const Params& params) {
  const int64_t channels = images.size(1), hw = images.size(2) * images.size(3);
  const int64_t image_size = channels * hw;
  const T* in = images.data_ptr<T>();
  T* o = out.data_ptr<T>();
  const at::Tensor values = params.values.contiguous();
  const at::Tensor applied = params.applied.contiguous();
  const double* v = values.data_ptr<double>();
  const bool* a = applied.data_ptr<bool>();
  parallel_rows(images.size(0), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      if (a[i]) {
        jitter_one(in + i * image_size, o + i * image_size, hw, static_cast<int>(channels), v + i * kJitterColumns);
      } else {
        std::memcpy(o + i * image_size, in + i * image_size, sizeof(T) * image_size);
      }
    }
  });
}

}  // namespace

bool color_jitter_fusable(const at::Tensor& images) {
  return images.device().is_cpu() && (images.scalar_type() == at::kFloat || images.scalar_type() == at::kDouble);
}

at::Tensor color_jitter_fused(const at::Tensor& images, const Params& params) {
  const at::Tensor in = images.contiguous();
  at::Tensor out = at::empty_like(in, at::MemoryFormat::Contiguous);
  if (in.scalar_type() == at::kFloat) {
    jitter_batch<float>(in, out, params);
  } else {
    jitter_batch<double>(in, out, params);
  }
  return out;
}

}  // namespace xlaunch::augment::detail
