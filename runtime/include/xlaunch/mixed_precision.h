// The mixed-precision setting: "no", "fp16" or "bf16", as the config, XLAUNCH_MIXED_PRECISION and
// the Accelerator's constructor spell it. What each one switches on:
//   no   — float32 everywhere; autocast off; the GradScaler passes through.
//   fp16 — autocast to float16 (CUDA; CPU where LibTorch supports it); the GradScaler scales the
//          loss and skips steps whose gradients overflowed.
//   bf16 — autocast to bfloat16 (CPU and CUDA); bfloat16 has float32's range, so no loss scaling.
//
// One enum for the launcher's config (config::MixedPrecision is this one) and the runtime. Free of
// torch, so the launcher includes it; the spellings are the settings table's
// (settings::kMixedPrecisions, xlaunch/settings.h), in the enum's order.
#pragma once

#include <algorithm>
#include <cctype>
#include <string>

#include "xlaunch/error.h"
#include "xlaunch/settings.h"

namespace xlaunch {

enum class MixedPrecision { No, Fp16, Bf16 };

// "no", "fp16" or "bf16".
inline const char* to_string(MixedPrecision mp) { return settings::kMixedPrecisions[static_cast<int>(mp)]; }

// Parses "no", "fp16" or "bf16" (any letter case; surrounding blanks ignored). Throws
// UsageError naming the value, where it came from (`source`, e.g. "XLAUNCH_MIXED_PRECISION")
// and the accepted values.
inline MixedPrecision parse_mixed_precision(const std::string& text, const std::string& source = "mixed_precision") {
  std::string s = text;
  s.erase(0, std::min(s.find_first_not_of(" \t"), s.size()));
  s.erase(s.find_last_not_of(" \t") + 1);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  for (MixedPrecision mp : {MixedPrecision::No, MixedPrecision::Fp16, MixedPrecision::Bf16})
    if (s == to_string(mp)) return mp;
  throw UsageError(source + "='" + text + "' is not a mixed precision xlaunch knows: use one of no, fp16, bf16" +
                   (s == "fp8" ? " (fp8 is not supported)" : ""));
}

// The setting the launcher exported (XLAUNCH_MIXED_PRECISION; "no" when unset).
MixedPrecision mixed_precision_from_env();

// Only fp16 needs loss scaling.
inline bool needs_grad_scaler(MixedPrecision mp) { return mp == MixedPrecision::Fp16; }

}  // namespace xlaunch
