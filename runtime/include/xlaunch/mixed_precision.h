// The mixed-precision setting: "no", "fp16" or "bf16", as the config, XLAUNCH_MIXED_PRECISION and
// the Accelerator's constructor spell it. What each one switches on:
//   no   — float32 everywhere; autocast off; the GradScaler passes through.
//   fp16 — autocast to float16 (CUDA; CPU where LibTorch supports it); the GradScaler scales the
//          loss and skips steps whose gradients overflowed.
//   bf16 — autocast to bfloat16 (CPU and CUDA); bfloat16 has float32's range, so no loss scaling.
#pragma once

#include <string>

namespace xlaunch {

enum class MixedPrecision { No, Fp16, Bf16 };

// Parses "no", "fp16" or "bf16" (any letter case; surrounding blanks ignored). Throws
// UsageError naming the value, where it came from (`source`, e.g. "XLAUNCH_MIXED_PRECISION")
// and the accepted values.
MixedPrecision parse_mixed_precision(const std::string& text, const std::string& source = "mixed_precision");

// "no", "fp16" or "bf16".
const char* to_string(MixedPrecision mp);

// The setting the launcher exported (XLAUNCH_MIXED_PRECISION; "no" when unset).
MixedPrecision mixed_precision_from_env();

// Only fp16 needs loss scaling.
inline bool needs_grad_scaler(MixedPrecision mp) { return mp == MixedPrecision::Fp16; }

}  // namespace xlaunch
