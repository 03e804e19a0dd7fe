#include "xlaunch/mixed_precision.h"

#include <algorithm>
#include <cctype>

#include "xlaunch/env_vars.h"
#include "xlaunch/error.h"

namespace xlaunch {

MixedPrecision parse_mixed_precision(const std::string& text, const std::string& source) {
  std::string s = text;
  s.erase(0, std::min(s.find_first_not_of(" \t"), s.size()));
  s.erase(s.find_last_not_of(" \t") + 1);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  if (s == "no") return MixedPrecision::No;
  if (s == "fp16") return MixedPrecision::Fp16;
  if (s == "bf16") return MixedPrecision::Bf16;
  throw UsageError(source + "='" + text + "' is not a mixed precision xlaunch knows: use one of no, fp16, bf16" +
                   (s == "fp8" ? " (fp8 is not supported)" : ""));
}

const char* to_string(MixedPrecision mp) {
  switch (mp) {
    case MixedPrecision::No: return "no";
    case MixedPrecision::Fp16: return "fp16";
    case MixedPrecision::Bf16: return "bf16";
  }
  return "?";
}

MixedPrecision mixed_precision_from_env() {
  return parse_mixed_precision(env::get_string(env::kMixedPrecision), env::kMixedPrecision.name);
}

}  // namespace xlaunch
