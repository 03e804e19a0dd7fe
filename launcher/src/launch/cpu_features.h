// Whether this machine's CPU has the 16-bit instructions that make mixed precision pay on a CPU
// job (docs/mixed-precision.md, "On a CPU"). bf16 autocast is fast only where oneDNN has bf16
// matmul kernels (AVX512-BF16, AMX-BF16); elsewhere it converts in software and runs slower than
// float32 (scripts/bench/amp.sh measured 0.05x on an AVX2-only CPU, 1.42x on one with
// AVX512-BF16). fp16 likewise needs AVX512-FP16 or AMX-FP16.
//
// `xlaunch config` leaves out of its mixed-precision question what does not pay on a CPU job,
// `xlaunch run` warns at the start of such a job, and the report's advice names mixed_precision.
// The probe reads the x86 `flags` line of /proc/cpuinfo (XLAUNCH_CPUINFO_FILE instead, for tests);
// a CPU without one (another architecture) is not judged: nothing is left out, nothing warned.
#pragma once

#include <string>

#include "xlaunch/config/launch_config.h"

namespace xlaunch::launcher {

struct CpuFeatures {
  bool known = false;  // an x86 flags line was read; false: nothing below is claimed
  bool avx512_bf16 = false, amx_bf16 = false, amx_tile = false, avx512_fp16 = false, amx_fp16 = false;
};

// Pure: the features of the first `flags` line of a /proc/cpuinfo text (every processor lists
// the same flags).
CpuFeatures cpu_features_of(const std::string& cpuinfo);

// This machine's: the file XLAUNCH_CPUINFO_FILE names, else /proc/cpuinfo. Unreadable
// /proc/cpuinfo: not known. An XLAUNCH_CPUINFO_FILE that cannot be read throws LaunchError.
CpuFeatures this_cpu_features();

// The cpuinfo flags that carry `mp`'s arithmetic: "avx512_bf16, amx_bf16" (bf16), "avx512_fp16,
// amx_fp16" (fp16), "" (no).
std::string flags_looked_for(config::MixedPrecision mp);

// Whether `mp` pays on a CPU with `f`: no always; bf16/fp16 when one of their flags is there, or
// when the CPU is not known (not judged).
bool pays_on_cpu(config::MixedPrecision mp, const CpuFeatures& f);

// "" when `mp` pays on `f`, else why not, naming the flags looked for: "mixed_precision bf16 on a
// CPU without AVX512-BF16 or AMX-BF16 (flags looked for: avx512_bf16, amx_bf16): bf16 autocast
// runs in software, measured 0.05x fp32 on such a CPU; set mixed_precision: no".
std::string cpu_mixed_precision_problem(config::MixedPrecision mp, const CpuFeatures& f);

// Whether a job with config `c` trains on CPUs on this machine (gpu_count GPUs found here):
// runs_on_cpu, or a single process on a machine without GPUs.
bool cpu_job(const config::LaunchConfig& c, int gpu_count);

// What `xlaunch run` and `xlaunch config default` warn at the start: "xlaunch: warning: " and
// cpu_mixed_precision_problem on this machine's CPU and a newline, for a CPU job (gpu_count GPUs
// here) whose mixed precision does not pay; "" otherwise (the CPU is read only when it matters).
std::string cpu_mixed_precision_warning(const config::LaunchConfig& c, int gpu_count);

}  // namespace xlaunch::launcher
