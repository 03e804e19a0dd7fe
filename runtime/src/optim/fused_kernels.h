// The fused optimizer loops on the CPU (fused_step.h): one pass over a range of a flat parameter,
// each element's parameter, gradient and state read once and written once.
//
// The arithmetic is LibTorch's, operation for operation in float, with its scalars rounded to
// float as its kernels round them, and a fused multiply-add exactly where its kernels use one
// (add_ with an alpha): so the result is LibTorch's step to the last bit, or within an ulp where
// its vectorised and tail loops round differently (tests/runtime/fused_step_test.cpp measures it).
#pragma once

#include <cstdint>

namespace xlaunch::optim::kernels {

// The parameter's and gradient's type. With a 16-bit parameter, the loops step its float32 master
// weights (`w`) and write the parameter as the master rounded to nearest even (as
// Tensor::to rounds), in the same pass; the gradient is read in the parameter's type. A parameter
// that no longer equals its master rounded (written since the last step: a loaded model, LibTorch's
// step, the user's own change) re-seeds its master from itself first, so the master never
// overrides a newer value. With float32, `low` is null and `w` is the parameter.
enum class Precision { Float, BFloat16, Half };

// One parameter's arrays for a step.
struct Arrays {
  float* w;            // the float32 weights: the parameter, or its master
  void* low;           // the 16-bit parameter, or null
  const void* g;       // the gradient, of the parameter's type
  Precision precision = Precision::Float;
};

// Adam and AdamW, one step; every scalar as the kernel uses it.
struct AdamScalars {
  float decay = 1.0f;      // AdamW: 1 - lr * weight_decay (1: none)
  float l2 = 0.0f;         // Adam: weight_decay, added to the gradient as weight_decay * p
  float beta1 = 0, one_minus_beta1 = 0, beta2 = 0, one_minus_beta2 = 0;
  float sqrt_bias_correction2 = 1, eps = 0;
  float neg_step_size = 0;  // -lr / bias_correction1
  bool amsgrad = false;
};
// Elements [b, b + n) of one parameter: `a` and the state arrays are the whole parameter's;
// max_exp_avg_sq is read only with amsgrad.
void adam_range(const AdamScalars& s, const Arrays& a, int64_t b, float* exp_avg, float* exp_avg_sq,
                float* max_exp_avg_sq, int64_t n);

struct SgdScalars {
  float weight_decay = 0, momentum = 0, one_minus_dampening = 1, neg_lr = 0;
  bool nesterov = false;
  bool first = false;  // the momentum buffer is new: it starts as the (decayed) gradient
};
// buf is read only with momentum != 0.
void sgd_range(const SgdScalars& s, const Arrays& a, int64_t b, float* buf, int64_t n);

// Lion (xlaunch/lion.h), one step.
struct LionScalars {
  float decay = 1.0f;  // 1 - lr * weight_decay (1: none)
  float beta1 = 0, one_minus_beta1 = 0, beta2 = 0, one_minus_beta2 = 0;
  float neg_lr = 0;
};
void lion_range(const LionScalars& s, const Arrays& a, int64_t b, float* exp_avg, int64_t n);

// The loops this CPU runs: "avx512", "avx2" (with FMA) or "baseline".
const char* vector_isa();

// Caps the loops' instruction set at `level` (2: AVX-512, 1: AVX2 with FMA, 0: the baseline); the
// CPU's best is used where it is lower. Returns the previous cap. For tests, which run each set
// the CPU can against the others; not to be called while a step runs.
int cap_vector_isa(int level);

}  // namespace xlaunch::optim::kernels
