// Autocast: inside an AutocastGuard, LibTorch runs the ops that gain from lower precision
// (matmul, linear, convolution...) in float16 or bfloat16 and keeps the sensitive ones (softmax,
// losses, reductions) in float32; parameters stay float32. This header is the only place that
// touches LibTorch's at::autocast API, which changed in 2.4 (device-generic functions replaced
// the per-backend ones); autocast.cpp holds both spellings, chosen by TORCH_VERSION.
//
// Autocast state is per thread: a guard affects the thread that made it, from construction to
// destruction. Run the forward pass and the loss under it, not backward (autograd runs each op's
// backward in the dtype its forward used).
#pragma once

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

#include <string>

#include "xlaunch/mixed_precision.h"

namespace xlaunch {

// The autocast dtype of a mixed-precision setting: Half, BFloat16, or Undefined for "no".
c10::ScalarType autocast_dtype(MixedPrecision mp);

// Empty when `dtype` autocast works on `device` with this LibTorch; otherwise the reason, as a
// user-facing sentence that says what to use instead. CPU takes bfloat16, and float16 when
// LibTorch supports it there (decided once per process by running a small matmul under
// autocast); CUDA takes float16 and bfloat16. Other devices and dtypes are refused.
std::string autocast_unsupported_reason(c10::DeviceType device, c10::ScalarType dtype);

class AutocastGuard {
 public:
  // Enables autocast to `dtype` on `device` for this thread. Throws UsageError with
  // autocast_unsupported_reason() when the combination is not supported.
  AutocastGuard(c10::DeviceType device, c10::ScalarType dtype);
  // From the mixed-precision setting; MixedPrecision::No makes a guard that does nothing.
  AutocastGuard(c10::DeviceType device, MixedPrecision mp);
  // Restores the thread's previous autocast state; the outermost guard also drops autocast's
  // cache of lower-precision weight copies.
  ~AutocastGuard();

  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;
  AutocastGuard(AutocastGuard&&) = delete;  // C++17 returns it from a factory without a move
  AutocastGuard& operator=(AutocastGuard&&) = delete;

  bool active() const { return active_; }

 private:
  void start(c10::ScalarType dtype, const std::string& context);

  c10::DeviceType device_;
  bool active_ = false;
  bool prev_enabled_ = false;
  c10::ScalarType prev_dtype_ = c10::ScalarType::Undefined;
};

// Whether autocast is on for `device` in this thread, and to which dtype.
bool autocast_enabled(c10::DeviceType device);
c10::ScalarType autocast_current_dtype(c10::DeviceType device);

}  // namespace xlaunch
