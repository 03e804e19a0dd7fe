// The fused loops (fused_kernels.h). This file is compiled with -ffp-contract=off and
// -fno-math-errno (CMakeLists.txt beside it): the only fused multiply-adds are the std::fma
// calls, where LibTorch's kernels use one, so each clone below rounds alike; and sqrt vectorises.
#include "optim/fused_kernels.h"

#include <cmath>

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

XLAUNCH_OPTIM_INLINE void adam_body(const AdamScalars& s, float* __restrict p, const float* __restrict g, float* __restrict m,
                float* __restrict v, float* __restrict vmax, int64_t n) {
  const float decay = s.decay, l2 = s.l2, b1 = s.beta1, c1 = s.one_minus_beta1, b2 = s.beta2,
              c2 = s.one_minus_beta2, sq = s.sqrt_bias_correction2, eps = s.eps, step = s.neg_step_size;
  const bool decoupled = decay != 1.0f, coupled = l2 != 0.0f;
  // Four loops, so that none tests an option per element.
  if (!s.amsgrad && !coupled) {
    for (int64_t i = 0; i < n; ++i) {
      const float gi = g[i];
      float pi = decoupled ? p[i] * decay : p[i];          // p.mul_(1 - lr * wd)
      const float mi = std::fma(gi, c1, m[i] * b1);        // exp_avg.mul_(b1).add_(g, 1 - b1)
      const float vi = std::fma(c2 * gi, gi, v[i] * b2);  // exp_avg_sq.mul_(b2).addcmul_(g, g, 1 - b2)
      const float denom = std::sqrt(vi) / sq + eps;        // (exp_avg_sq.sqrt() / sqrt(bc2)).add_(eps)
      pi = pi + step * mi / denom;                         // p.addcdiv_(exp_avg, denom, -lr / bc1)
      p[i] = pi;
      m[i] = mi;
      v[i] = vi;
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    float pi = p[i];
    const float gi = coupled ? std::fma(pi, l2, g[i]) : g[i];  // grad.add(p, wd)
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
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
  }
}

XLAUNCH_OPTIM_INLINE void sgd_body(const SgdScalars& s, float* __restrict p, const float* __restrict g, float* __restrict buf,
               int64_t n) {
  const float wd = s.weight_decay, mom = s.momentum, damp = s.one_minus_dampening, lr = s.neg_lr;
  const bool decay = wd != 0.0f;
  if (mom == 0.0f) {
    for (int64_t i = 0; i < n; ++i) {
      const float d = decay ? std::fma(p[i], wd, g[i]) : g[i];  // d_p.add(p, wd)
      p[i] = std::fma(d, lr, p[i]);                               // p.add_(d_p, -lr)
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    float d = decay ? std::fma(p[i], wd, g[i]) : g[i];
    // buf = clone(d_p) on the first step, else buf.mul_(momentum).add_(d_p, 1 - dampening)
    const float b = s.first ? d : std::fma(d, damp, buf[i] * mom);
    buf[i] = b;
    d = s.nesterov ? std::fma(b, mom, d) : b;  // d_p.add(buf, momentum), or buf
    p[i] = std::fma(d, lr, p[i]);
  }
}

XLAUNCH_OPTIM_INLINE void lion_body(const LionScalars& s, float* __restrict p, const float* __restrict g,
                                    float* __restrict m, int64_t n) {
  const float decay = s.decay, b1 = s.beta1, c1 = s.one_minus_beta1, b2 = s.beta2, c2 = s.one_minus_beta2,
              lr = s.neg_lr;
  const bool decoupled = decay != 1.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i], mi = m[i];
    const float pi = decoupled ? p[i] * decay : p[i];  // p.mul_(1 - lr * wd)
    const float u = std::fma(gi, c1, mi * b1);          // exp_avg.mul(b1).add_(g, 1 - b1)
    const float sign = static_cast<float>(0.0f < u) - static_cast<float>(u < 0.0f);  // sign_(): 0 for 0 and NaN
    p[i] = std::fma(sign, lr, pi);                      // p.add_(update, -lr)
    m[i] = std::fma(gi, c2, mi * b2);                   // exp_avg.mul_(b2).add_(g, 1 - b2)
  }
}

#if XLAUNCH_OPTIM_X86
#define XLAUNCH_OPTIM_AVX512 __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx2,fma")))
#define XLAUNCH_OPTIM_AVX2 __attribute__((target("avx2,fma")))
XLAUNCH_OPTIM_AVX512 void adam_avx512(const AdamScalars& s, float* p, const float* g, float* m, float* v, float* x, int64_t n) {
  adam_body(s, p, g, m, v, x, n);
}
XLAUNCH_OPTIM_AVX2 void adam_avx2(const AdamScalars& s, float* p, const float* g, float* m, float* v, float* x, int64_t n) {
  adam_body(s, p, g, m, v, x, n);
}
XLAUNCH_OPTIM_AVX512 void sgd_avx512(const SgdScalars& s, float* p, const float* g, float* b, int64_t n) {
  sgd_body(s, p, g, b, n);
}
XLAUNCH_OPTIM_AVX2 void sgd_avx2(const SgdScalars& s, float* p, const float* g, float* b, int64_t n) {
  sgd_body(s, p, g, b, n);
}

XLAUNCH_OPTIM_AVX512 void lion_avx512(const LionScalars& s, float* p, const float* g, float* m, int64_t n) {
  lion_body(s, p, g, m, n);
}
XLAUNCH_OPTIM_AVX2 void lion_avx2(const LionScalars& s, float* p, const float* g, float* m, int64_t n) {
  lion_body(s, p, g, m, n);
}

// 2: AVX-512, 1: AVX2 with FMA, 0: the baseline.
int level() {
  static const int l = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512bw"))
      return 2;
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 1 : 0;
  }();
  return l;
}
#endif

}  // namespace

void adam_range(const AdamScalars& s, float* p, const float* g, float* m, float* v, float* max_v, int64_t n) {
#if XLAUNCH_OPTIM_X86
  switch (level()) {
    case 2: return adam_avx512(s, p, g, m, v, max_v, n);
    case 1: return adam_avx2(s, p, g, m, v, max_v, n);
  }
#endif
  adam_body(s, p, g, m, v, max_v, n);
}

void sgd_range(const SgdScalars& s, float* p, const float* g, float* buf, int64_t n) {
#if XLAUNCH_OPTIM_X86
  switch (level()) {
    case 2: return sgd_avx512(s, p, g, buf, n);
    case 1: return sgd_avx2(s, p, g, buf, n);
  }
#endif
  sgd_body(s, p, g, buf, n);
}

void lion_range(const LionScalars& s, float* p, const float* g, float* m, int64_t n) {
#if XLAUNCH_OPTIM_X86
  switch (level()) {
    case 2: return lion_avx512(s, p, g, m, n);
    case 1: return lion_avx2(s, p, g, m, n);
  }
#endif
  lion_body(s, p, g, m, n);
}

const char* vector_isa() {
#if XLAUNCH_OPTIM_X86
  return level() == 2 ? "avx512" : level() == 1 ? "avx2" : "baseline";
#else
  return "baseline";
#endif
}

}  // namespace xlaunch::optim::kernels
