// The fused loops (fused_kernels.h). This file is compiled with -ffp-contract=off and
// -fno-math-errno (CMakeLists.txt beside it): the only fused multiply-adds are the std::fma
// calls, where LibTorch's kernels use one, so each clone below rounds alike; and sqrt vectorises.
#include "optim/fused_kernels.h"

#include <cmath>

// Each loop compiled three times on x86-64, the loader picking the one this CPU runs (GCC's and
// Clang's target_clones): AVX-512 (16 floats a vector), AVX2 with FMA (8), and the baseline,
// where std::fma is a call (slow, but the same result).
#if defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define XLAUNCH_OPTIM_CLONES __attribute__((target_clones("arch=skylake-avx512", "arch=haswell", "default")))
#endif
#endif
#ifndef XLAUNCH_OPTIM_CLONES
#define XLAUNCH_OPTIM_CLONES
#endif

namespace xlaunch::optim::kernels {
namespace {

// torch.max's rule: NaN wins.
inline float max_nan(float a, float b) { return (b > a || b != b) ? b : a; }

}  // namespace

XLAUNCH_OPTIM_CLONES
void adam_range(const AdamScalars& s, float* __restrict p, const float* __restrict g, float* __restrict m,
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

XLAUNCH_OPTIM_CLONES
void sgd_range(const SgdScalars& s, float* __restrict p, const float* __restrict g, float* __restrict buf,
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

}  // namespace xlaunch::optim::kernels
