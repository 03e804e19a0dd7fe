// /proc/cpuinfo texts of three kinds of CPU, for the tests of the CPU probe (cpu_features.h) and of
// what `xlaunch config` and `xlaunch run` make of it, which read them through XLAUNCH_CPUINFO_FILE:
// never this machine's own flags. One processor each (the probe reads the first flags line).
#pragma once

#include <fstream>
#include <string>

namespace xlaunch::test {

// An Intel Xeon E5 v4 (Broadwell): AVX2, no AVX-512; f16c converts halves but has no fp16 arithmetic.
inline const char* kCpuinfoAvx2 =
    "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) CPU E5-2680 v4 @ 2.40GHz\n"
    "flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse "
    "sse2 ss ht syscall nx pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology cpuid pni pclmulqdq ssse3 fma "
    "cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt aes xsave avx f16c rdrand hypervisor lahf_lm abm 3dnowprefetch "
    "fsgsbase bmi1 hle avx2 smep bmi2 erms invpcid rtm rdseed adx smap xsaveopt arat md_clear\n"
    "bugs\t\t: spectre_v1 spectre_v2\n\n";

// An AMD EPYC 9004 (Zen 4): AVX512-BF16, no AVX512-FP16, no AMX.
inline const char* kCpuinfoAvx512Bf16 =
    "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9454 48-Core Processor\n"
    "flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 "
    "ht syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm rep_good nopl cpuid pni pclmulqdq ssse3 fma cx16 sse4_1 "
    "sse4_2 x2apic movbe popcnt aes xsave avx f16c rdrand lahf_lm cmp_legacy abm sse4a misalignsse 3dnowprefetch "
    "bmi1 avx2 smep bmi2 erms invpcid avx512f avx512dq rdseed adx smap avx512ifma clflushopt clwb avx512cd sha_ni "
    "avx512bw avx512vl xsaveopt xsavec xgetbv1 xsaves avx512_bf16 clzero xsaveerptr avx512vbmi umip pku "
    "avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni avx512_bitalg avx512_vpopcntdq rdpid fsrm\n\n";

// An Intel Xeon 4th generation (Sapphire Rapids): AVX512-BF16, AVX512-FP16 and AMX (bf16 tiles).
inline const char* kCpuinfoAmx =
    "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n"
    "flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 "
    "ss ht syscall nx pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology cpuid pni pclmulqdq ssse3 fma cx16 "
    "pcid sse4_1 sse4_2 x2apic movbe popcnt aes xsave avx f16c rdrand avx2 bmi2 avx512f avx512dq rdseed adx "
    "avx512ifma clflushopt clwb avx512cd sha_ni avx512bw avx512vl xsaveopt avx_vnni avx512_bf16 wbnoinvd "
    "avx512vbmi umip pku avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni avx512_bitalg avx512_vpopcntdq rdpid "
    "movdiri movdir64b serialize tsxldtrk amx_bf16 avx512_fp16 amx_tile amx_int8 arch_capabilities\n\n";

// An Arm server (Neoverse): no x86 flags line, so the probe claims nothing.
inline const char* kCpuinfoArm =
    "processor\t: 0\nBogoMIPS\t: 2100.00\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp "
    "asimdhp cpuid asimdrdm lrcpc dcpop asimddp ssbs bf16 i8mm\nCPU implementer\t: 0x41\n\n";

// Writes `text` to `path` (for XLAUNCH_CPUINFO_FILE) and returns the path.
inline std::string write_cpuinfo(const std::string& path, const char* text) {
  std::ofstream(path) << text;
  return path;
}

}  // namespace xlaunch::test
