// The one place that calls at::autocast. LibTorch 2.4 replaced the per-backend functions
// (set_enabled / set_cpu_enabled, set_autocast_gpu_dtype / set_autocast_cpu_dtype, ...) with
// device-generic ones; both spellings are below, chosen at compile time.
#include "xlaunch/autocast.h"

#include <ATen/autocast_mode.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/ones.h>
#include <torch/version.h>

#include "xlaunch/error.h"

#define XLAUNCH_AUTOCAST_GENERIC_API (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4))

namespace xlaunch {
namespace {

#if XLAUNCH_AUTOCAST_GENERIC_API
bool get_enabled(c10::DeviceType d) { return at::autocast::is_autocast_enabled(d); }
void set_enabled(c10::DeviceType d, bool on) { at::autocast::set_autocast_enabled(d, on); }
c10::ScalarType get_dtype(c10::DeviceType d) { return at::autocast::get_autocast_dtype(d); }
void set_dtype(c10::DeviceType d, c10::ScalarType t) { at::autocast::set_autocast_dtype(d, t); }
#else
bool get_enabled(c10::DeviceType d) {
  return d == c10::DeviceType::CUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
}
void set_enabled(c10::DeviceType d, bool on) {
  if (d == c10::DeviceType::CUDA) at::autocast::set_enabled(on);
  else at::autocast::set_cpu_enabled(on);
}
c10::ScalarType get_dtype(c10::DeviceType d) {
  return d == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
}
void set_dtype(c10::DeviceType d, c10::ScalarType t) {
  if (d == c10::DeviceType::CUDA) at::autocast::set_autocast_gpu_dtype(t);
  else at::autocast::set_autocast_cpu_dtype(t);
}
#endif

// Enter/leave as torch.autocast does: save, set, count nesting; the outermost exit clears the
// cast cache (it holds lower-precision copies of the weights for the current forward).
struct State {
  bool enabled;
  c10::ScalarType dtype;
};

State enter(c10::DeviceType d, c10::ScalarType t) {
  const State prev{get_enabled(d), get_dtype(d)};
  set_enabled(d, true);
  set_dtype(d, t);
  at::autocast::increment_nesting();
  return prev;
}

void leave(c10::DeviceType d, const State& prev) {
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  set_enabled(d, prev.enabled);
  set_dtype(d, prev.dtype);
}

// Whether CPU autocast really lowers a matmul to float16 in this LibTorch.
bool cpu_fp16_works() {
  static const bool works = [] {
    const State prev = enter(c10::DeviceType::CPU, c10::kHalf);
    bool ok = false;
    try {
      const at::Tensor a = at::ones({2, 2});
      ok = at::mm(a, a).scalar_type() == c10::kHalf;
    } catch (const std::exception&) {
      ok = false;
    }
    leave(c10::DeviceType::CPU, prev);
    return ok;
  }();
  return works;
}

}  // namespace

c10::ScalarType autocast_dtype(MixedPrecision mp) {
  switch (mp) {
    case MixedPrecision::Fp16: return c10::kHalf;
    case MixedPrecision::Bf16: return c10::kBFloat16;
    case MixedPrecision::No: break;
  }
  return c10::ScalarType::Undefined;
}

std::string autocast_unsupported_reason(c10::DeviceType device, c10::ScalarType dtype) {
  if (device != c10::DeviceType::CPU && device != c10::DeviceType::CUDA)
    return std::string("mixed precision supports CPU and CUDA devices, not ") + c10::DeviceTypeName(device) +
           "; use mixed_precision: no";
  if (dtype != c10::kHalf && dtype != c10::kBFloat16)
    return std::string("autocast takes float16 (fp16) or bfloat16 (bf16), not ") + c10::toString(dtype);
  if (device == c10::DeviceType::CPU && dtype == c10::kHalf && !cpu_fp16_works())
    return "fp16 autocast on the CPU is not supported by this LibTorch (" TORCH_VERSION
           "); use mixed_precision: bf16 on the CPU, or fp16 on a GPU";
  return {};
}

AutocastGuard::AutocastGuard(c10::DeviceType device, c10::ScalarType dtype) : device_(device) {
  start(dtype, "");
}

AutocastGuard::AutocastGuard(c10::DeviceType device, MixedPrecision mp) : device_(device) {
  if (mp != MixedPrecision::No) start(autocast_dtype(mp), std::string("mixed_precision=") + to_string(mp) + ": ");
}

void AutocastGuard::start(c10::ScalarType dtype, const std::string& context) {
  const std::string why = autocast_unsupported_reason(device_, dtype);
  if (!why.empty()) throw UsageError(context + why);
  const State prev = enter(device_, dtype);
  prev_enabled_ = prev.enabled;
  prev_dtype_ = prev.dtype;
  active_ = true;
}

AutocastGuard::~AutocastGuard() {
  if (active_) leave(device_, State{prev_enabled_, prev_dtype_});
}

bool autocast_enabled(c10::DeviceType device) { return get_enabled(device); }
c10::ScalarType autocast_current_dtype(c10::DeviceType device) { return get_dtype(device); }

}  // namespace xlaunch
