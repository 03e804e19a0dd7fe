// The fused loops (fused_kernels.h). This file is compiled with -ffp-contract=off and
// -fno-math-errno (CMakeLists.txt beside it): the only fused multiply-adds are the std::fma
// calls, where LibTorch's kernels use one, so each clone below rounds alike; and sqrt vectorises.
#include "optim/fused_kernels.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <type_traits>

// Each loop is compiled three times on x86-64: for AVX-512 (16 floats a vector), AVX2 with FMA (8)
// and the baseline (where std::fma is a call: slow, but the same result); the first call asks the
// CPU which it has (__builtin_cpu_supports, by feature: GCC's target_clones("arch=...") would match
// the CPU model instead, and leave a newer CPU the baseline).
#if defined(__x86_64__) && defined(__GNUC__)
#define XLAUNCH_OPTIM_X86 1
#define XLAUNCH_OPTIM_INLINE inline __attribute__((always_inline))
#else
#define XLAUNCH_OPTIM_X86 0
#define XLAUNCH_OPTIM_INLINE inline
#endif

namespace xlaunch::optim::kernels {
namespace {

// torch.max's rule: NaN wins.
inline float max_nan(float a, float b) { return (b > a || b != b) ? b : a; }

// A parameter's element as the loops see it, and its writing back (fused_kernels.h, Precision):
// with a 16-bit parameter, the master, unless the parameter no longer equals it rounded.
template <class P>
constexpr bool kLow = !std::is_same_v<P, float>;

template <class P>
XLAUNCH_OPTIM_INLINE float weight(const float* __restrict w, const P* __restrict low, int64_t i) {
  if constexpr (kLow<P>) {
    const float m = w[i];
    return P(m).x == low[i].x ? m : static_cast<float>(low[i]);
  } else {
    return w[i];
  }
}

template <class P>
XLAUNCH_OPTIM_INLINE void store(float* __restrict w, P* __restrict low, int64_t i, float v) {
  w[i] = v;
  if constexpr (kLow<P>) low[i] = P(v);
}

template <class P>
XLAUNCH_OPTIM_INLINE void adam_body(const AdamScalars& s, float* __restrict w, P* __restrict low, const P* __restrict g,
                                    float* __restrict m, float* __restrict v, float* __restrict vmax, int64_t n) {
  const float decay = s.decay, l2 = s.l2, b1 = s.beta1, c1 = s.one_minus_beta1, b2 = s.beta2,
              c2 = s.one_minus_beta2, sq = s.sqrt_bias_correction2, eps = s.eps, step = s.neg_step_size;
  const bool decoupled = decay != 1.0f, coupled = l2 != 0.0f;
  // Four loops, so that none tests an option per element.
  if (!s.amsgrad && !coupled) {
    for (int64_t i = 0; i < n; ++i) {
      const float gi = static_cast<float>(g[i]);
      float pi = weight(w, low, i);
      if (decoupled) pi = pi * decay;                      // p.mul_(1 - lr * wd)
      const float mi = std::fma(gi, c1, m[i] * b1);        // exp_avg.mul_(b1).add_(g, 1 - b1)
      const float vi = std::fma(c2 * gi, gi, v[i] * b2);  // exp_avg_sq.mul_(b2).addcmul_(g, g, 1 - b2)
      const float denom = std::sqrt(vi) / sq + eps;        // (exp_avg_sq.sqrt() / sqrt(bc2)).add_(eps)
      pi = pi + step * mi / denom;                         // p.addcdiv_(exp_avg, denom, -lr / bc1)
      store(w, low, i, pi);
      m[i] = mi;
      v[i] = vi;
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    float pi = weight(w, low, i);
    const float gi = coupled ? std::fma(pi, l2, static_cast<float>(g[i])) : static_cast<float>(g[i]);  // grad.add(p, wd)
    if (decoupled) pi = pi * decay;
    const float mi = std::fma(gi, c1, m[i] * b1);
    const float vi = std::fma(c2 * gi, gi, v[i] * b2);
    float src = vi;
    if (s.amsgrad) {
      src = max_nan(vmax[i], vi);  // torch::max_out(max_exp_avg_sq, exp_avg_sq, max_exp_avg_sq)
      vmax[i] = src;
    }
    const float denom = std::sqrt(src) / sq + eps;
    pi = pi + step * mi / denom;
    store(w, low, i, pi);
    m[i] = mi;
    v[i] = vi;
  }
}

template <class P>
XLAUNCH_OPTIM_INLINE void sgd_body(const SgdScalars& s, float* __restrict w, P* __restrict low, const P* __restrict g,
                                   float* __restrict buf, int64_t n) {
  const float wd = s.weight_decay, mom = s.momentum, damp = s.one_minus_dampening, lr = s.neg_lr;
  const bool decay = wd != 0.0f;
  if (mom == 0.0f) {
    for (int64_t i = 0; i < n; ++i) {
      const float pi = weight(w, low, i), gi = static_cast<float>(g[i]);
      const float d = decay ? std::fma(pi, wd, gi) : gi;  // d_p.add(p, wd)
      store(w, low, i, std::fma(d, lr, pi));                // p.add_(d_p, -lr)
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float pi = weight(w, low, i), gi = static_cast<float>(g[i]);
    float d = decay ? std::fma(pi, wd, gi) : gi;
    // buf = clone(d_p) on the first step, else buf.mul_(momentum).add_(d_p, 1 - dampening)
    const float b = s.first ? d : std::fma(d, damp, buf[i] * mom);
    buf[i] = b;
    d = s.nesterov ? std::fma(b, mom, d) : b;  // d_p.add(buf, momentum), or buf
    store(w, low, i, std::fma(d, lr, pi));
  }
}

template <class P>
XLAUNCH_OPTIM_INLINE void lion_body(const LionScalars& s, float* __restrict w, P* __restrict low, const P* __restrict g,
                                    float* __restrict m, int64_t n) {
  const float decay = s.decay, b1 = s.beta1, c1 = s.one_minus_beta1, b2 = s.beta2, c2 = s.one_minus_beta2,
              lr = s.neg_lr;
  const bool decoupled = decay != 1.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float gi = static_cast<float>(g[i]), mi = m[i];
    float pi = weight(w, low, i);
    if (decoupled) pi = pi * decay;                  // p.mul_(1 - lr * wd)
    const float u = std::fma(gi, c1, mi * b1);       // exp_avg.mul(b1).add_(g, 1 - b1)
    const float sign = static_cast<float>(0.0f < u) - static_cast<float>(u < 0.0f);  // sign_(): 0 for 0 and NaN
    store(w, low, i, std::fma(sign, lr, pi));        // p.add_(update, -lr)
    m[i] = std::fma(gi, c2, mi * b2);                // exp_avg.mul_(b2).add_(g, 1 - b2)
  }
}

// One call of a body for the arrays' precision, from element b; the entries below are defined once
// per instruction set, each inlining the bodies compiled for it.
#define XLAUNCH_OPTIM_DISPATCH(body, scalars, a, b, n, ...)                                                        \
  switch ((a).precision) {                                                                                       \
    case Precision::Float:                                                                                       \
      return body<float>(scalars, (a).w + (b), nullptr, static_cast<const float*>((a).g) + (b), __VA_ARGS__, n); \
    case Precision::BFloat16:                                                                                    \
      return body<c10::BFloat16>(scalars, (a).w + (b), static_cast<c10::BFloat16*>((a).low) + (b),              \
                                 static_cast<const c10::BFloat16*>((a).g) + (b), __VA_ARGS__, n);               \
    case Precision::Half:                                                                                        \
      return body<c10::Half>(scalars, (a).w + (b), static_cast<c10::Half*>((a).low) + (b),                      \
                             static_cast<const c10::Half*>((a).g) + (b), __VA_ARGS__, n);                       \
  }

#define XLAUNCH_OPTIM_ENTRIES(suffix, attr)                                                                          \
  attr void adam_##suffix(const AdamScalars& s, const Arrays& a, int64_t b, float* m, float* v, float* x, int64_t n) { \
    XLAUNCH_OPTIM_DISPATCH(adam_body, s, a, b, n, m + b, v + b, x ? x + b : nullptr)                               \
  }                                                                                                                  \
  attr void sgd_##suffix(const SgdScalars& s, const Arrays& a, int64_t b, float* buf, int64_t n) {                   \
    XLAUNCH_OPTIM_DISPATCH(sgd_body, s, a, b, n, buf ? buf + b : nullptr)                                           \
  }                                                                                                                  \
  attr void lion_##suffix(const LionScalars& s, const Arrays& a, int64_t b, float* m, int64_t n) {                  \
    XLAUNCH_OPTIM_DISPATCH(lion_body, s, a, b, n, m + b)                                                             \
  }

XLAUNCH_OPTIM_ENTRIES(baseline, )

#if XLAUNCH_OPTIM_X86
#define XLAUNCH_OPTIM_AVX512 __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx2,fma")))
#define XLAUNCH_OPTIM_AVX2 __attribute__((target("avx2,fma")))
XLAUNCH_OPTIM_ENTRIES(avx512, XLAUNCH_OPTIM_AVX512)
XLAUNCH_OPTIM_ENTRIES(avx2, XLAUNCH_OPTIM_AVX2)

#endif

std::atomic<int> g_cap{2};  // cap_vector_isa's

// 2: AVX-512, 1: AVX2 with FMA, 0: the baseline; at most g_cap.
int level() {
#if XLAUNCH_OPTIM_X86
  static const int l = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512bw"))
      return 2;
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 1 : 0;
  }();
  return std::min(l, g_cap.load(std::memory_order_relaxed));
#else
  return 0;
#endif
}

}  // namespace

void adam_range(const AdamScalars& s, const Arrays& a, int64_t b, float* m, float* v, float* max_v, int64_t n) {
#if XLAUNCH_OPTIM_X86
  switch (level()) {
    case 2: return adam_avx512(s, a, b, m, v, max_v, n);
    case 1: return adam_avx2(s, a, b, m, v, max_v, n);
  }
#endif
  adam_baseline(s, a, b, m, v, max_v, n);
}

void sgd_range(const SgdScalars& s, const Arrays& a, int64_t b, float* buf, int64_t n) {
#if XLAUNCH_OPTIM_X86
  switch (level()) {
    case 2: return sgd_avx512(s, a, b, buf, n);
    case 1: return sgd_avx2(s, a, b, buf, n);
  }
#endif
  sgd_baseline(s, a, b, buf, n);
}

void lion_range(const LionScalars& s, const Arrays& a, int64_t b, float* m, int64_t n) {
#if XLAUNCH_OPTIM_X86
  switch (level()) {
    case 2: return lion_avx512(s, a, b, m, n);
    case 1: return lion_avx2(s, a, b, m, n);
  }
#endif
  lion_baseline(s, a, b, m, n);
}

const char* vector_isa() {
  const int l = level();
  return l == 2 ? "avx512" : l == 1 ? "avx2" : "baseline";
}

int cap_vector_isa(int level) { return g_cap.exchange(std::clamp(level, 0, 2)); }

}  // namespace xlaunch::optim::kernels
