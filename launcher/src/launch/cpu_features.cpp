#include "launch/cpu_features.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "launch/launch_error.h"
#include "xlaunch/env_vars.h"

namespace xlaunch::launcher {

CpuFeatures cpu_features_of(const std::string& cpuinfo) {
  CpuFeatures f;
  std::istringstream lines(cpuinfo);
  for (std::string line; std::getline(lines, line);) {
    // "flags\t\t: fpu vme ... avx512_bf16 ..."; "Features" (Arm) and the rest are not this.
    if (line.compare(0, 5, "flags") != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos || line.find_first_not_of(" \t", 5) != colon) continue;
    f.known = true;
    std::istringstream words(line.substr(colon + 1));
    for (std::string w; words >> w;) {
      f.avx512_bf16 |= w == "avx512_bf16";
      f.amx_bf16 |= w == "amx_bf16";
      f.amx_tile |= w == "amx_tile";
      f.avx512_fp16 |= w == "avx512_fp16";
      f.amx_fp16 |= w == "amx_fp16";
    }
    break;
  }
  return f;
}

CpuFeatures this_cpu_features() {
  const std::string override_path = env::get_string(env::kCpuinfoFile);
  const std::string path = override_path.empty() ? "/proc/cpuinfo" : override_path;
  std::ifstream in(path);
  if (!in) {
    if (path == "/proc/cpuinfo") return {};
    throw LaunchError(std::string(env::kCpuinfoFile.name) + "=" + path + " cannot be read (" + std::strerror(errno) +
                      "); point it at a copy of /proc/cpuinfo, or unset it to read this machine's");
  }
  std::ostringstream text;
  text << in.rdbuf();
  return cpu_features_of(text.str());
}

std::string flags_looked_for(config::MixedPrecision mp) {
  switch (mp) {
    case config::MixedPrecision::Bf16: return "avx512_bf16, amx_bf16";
    case config::MixedPrecision::Fp16: return "avx512_fp16, amx_fp16";
    case config::MixedPrecision::No: break;
  }
  return "";
}

bool pays_on_cpu(config::MixedPrecision mp, const CpuFeatures& f) {
  if (!f.known) return true;
  switch (mp) {
    // AMX's tiles come with its bf16 and fp16 instructions; amx_tile alone carries no arithmetic.
    case config::MixedPrecision::Bf16: return f.avx512_bf16 || (f.amx_bf16 && f.amx_tile);
    case config::MixedPrecision::Fp16: return f.avx512_fp16 || (f.amx_fp16 && f.amx_tile);
    case config::MixedPrecision::No: break;
  }
  return true;
}

std::string cpu_mixed_precision_problem(config::MixedPrecision mp, const CpuFeatures& f) {
  if (pays_on_cpu(mp, f)) return "";
  const bool bf16 = mp == config::MixedPrecision::Bf16;
  return std::string("mixed_precision ") + config::to_string(mp) + " on a CPU without " +
         (bf16 ? "AVX512-BF16 or AMX-BF16" : "AVX512-FP16 or AMX-FP16") + " (flags looked for: " + flags_looked_for(mp) +
         "): " + config::to_string(mp) + " autocast runs in software, measured " +
         (bf16 ? "0.05x fp32 on such a CPU" : "0.06x fp32 on a CPU with AVX512-BF16 but no AVX512-FP16") +
         "; set mixed_precision: no";
}

bool cpu_job(const config::LaunchConfig& c, int gpu_count) {
  return config::runs_on_cpu(c) || (c.distributed_type == config::DistributedType::No && gpu_count == 0);
}

std::string cpu_mixed_precision_warning(const config::LaunchConfig& c, int gpu_count) {
  if (c.mixed_precision == config::MixedPrecision::No || !cpu_job(c, gpu_count)) return "";
  const std::string why = cpu_mixed_precision_problem(c.mixed_precision, this_cpu_features());
  return why.empty() ? "" : "xlaunch: warning: " + why + "\n";
}

}  // namespace xlaunch::launcher
