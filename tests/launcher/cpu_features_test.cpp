// The CPU probe (launch/cpu_features.h) on literal /proc/cpuinfo texts: which 16-bit instructions a
// CPU has, whether bf16/fp16 mixed precision pays on it, and the warning that names the flags looked
// for. This machine's own flags are never read (XLAUNCH_CPUINFO_FILE points at the samples).
#include <gtest/gtest.h>

#include <cstdlib>

#include "cpuinfo_samples.h"
#include "launch/cpu_features.h"
#include "launch/launch_error.h"
#include "scratch_dir.h"

using namespace xlaunch::launcher;
using xlaunch::config::MixedPrecision;

TEST(CpuFeatures, AnAvx2CpuHasNoSixteenBitUnits) {
  const CpuFeatures f = cpu_features_of(xlaunch::test::kCpuinfoAvx2);
  EXPECT_TRUE(f.known);
  EXPECT_FALSE(f.avx512_bf16 || f.amx_bf16 || f.amx_tile || f.avx512_fp16 || f.amx_fp16);  // f16c is not fp16 arithmetic
  EXPECT_TRUE(pays_on_cpu(MixedPrecision::No, f));
  EXPECT_FALSE(pays_on_cpu(MixedPrecision::Bf16, f));
  EXPECT_FALSE(pays_on_cpu(MixedPrecision::Fp16, f));
}

TEST(CpuFeatures, AnAvx512Bf16CpuPaysForBf16Only) {
  const CpuFeatures f = cpu_features_of(xlaunch::test::kCpuinfoAvx512Bf16);
  EXPECT_TRUE(f.known && f.avx512_bf16);
  EXPECT_FALSE(f.amx_bf16 || f.avx512_fp16);
  EXPECT_TRUE(pays_on_cpu(MixedPrecision::Bf16, f));
  EXPECT_FALSE(pays_on_cpu(MixedPrecision::Fp16, f));
}

TEST(CpuFeatures, AnAmxCpuPaysForBoth) {
  const CpuFeatures f = cpu_features_of(xlaunch::test::kCpuinfoAmx);
  EXPECT_TRUE(f.known && f.avx512_bf16 && f.amx_bf16 && f.amx_tile && f.avx512_fp16);
  EXPECT_FALSE(f.amx_fp16);
  EXPECT_TRUE(pays_on_cpu(MixedPrecision::Bf16, f));
  EXPECT_TRUE(pays_on_cpu(MixedPrecision::Fp16, f));
  // AMX-BF16 alone (no AVX512-BF16) pays too; amx_bf16 without its tiles does not.
  const CpuFeatures amx_only = cpu_features_of("flags\t: avx2 amx_bf16 amx_tile amx_fp16\n");
  EXPECT_TRUE(pays_on_cpu(MixedPrecision::Bf16, amx_only));
  EXPECT_TRUE(pays_on_cpu(MixedPrecision::Fp16, amx_only));
  EXPECT_FALSE(pays_on_cpu(MixedPrecision::Bf16, cpu_features_of("flags\t: avx2 amx_bf16\n")));
}

TEST(CpuFeatures, ACpuWithoutAFlagsLineIsNotJudged) {
  const CpuFeatures arm = cpu_features_of(xlaunch::test::kCpuinfoArm);
  EXPECT_FALSE(arm.known);
  EXPECT_TRUE(pays_on_cpu(MixedPrecision::Bf16, arm));
  EXPECT_EQ(cpu_mixed_precision_problem(MixedPrecision::Fp16, arm), "");
  EXPECT_FALSE(cpu_features_of("").known);
  // A word that only starts like one: "flagship: avx512_bf16" is no flags line.
  EXPECT_FALSE(cpu_features_of("flagship\t: avx512_bf16\n").known);
}

TEST(CpuFeatures, TheWarningNamesTheFlagsLookedFor) {
  const CpuFeatures avx2 = cpu_features_of(xlaunch::test::kCpuinfoAvx2);
  EXPECT_EQ(cpu_mixed_precision_problem(MixedPrecision::Bf16, avx2),
            "mixed_precision bf16 on a CPU without AVX512-BF16 or AMX-BF16 (flags looked for: avx512_bf16, amx_bf16): "
            "bf16 autocast runs in software, measured 0.05x fp32 on such a CPU; set mixed_precision: no");
  EXPECT_EQ(cpu_mixed_precision_problem(MixedPrecision::Fp16, avx2),
            "mixed_precision fp16 on a CPU without AVX512-FP16 or AMX-FP16 (flags looked for: avx512_fp16, amx_fp16): "
            "fp16 autocast runs in software, measured 0.06x fp32 on a CPU with AVX512-BF16 but no AVX512-FP16; set "
            "mixed_precision: no");
  EXPECT_EQ(cpu_mixed_precision_problem(MixedPrecision::No, avx2), "");
  EXPECT_EQ(cpu_mixed_precision_problem(MixedPrecision::Bf16, cpu_features_of(xlaunch::test::kCpuinfoAvx512Bf16)), "");
}

TEST(CpuFeatures, CpuJobs) {
  xlaunch::config::LaunchConfig c;
  EXPECT_TRUE(cpu_job(c, 0));   // one process, no GPU here
  EXPECT_FALSE(cpu_job(c, 1));  // one process on the GPU
  c.use_cpu = true;
  EXPECT_TRUE(cpu_job(c, 1));
  c.use_cpu = false;
  c.distributed_type = xlaunch::config::DistributedType::MultiGpu;
  EXPECT_FALSE(cpu_job(c, 0));
  c.distributed_type = xlaunch::config::DistributedType::MultiCpu;
  EXPECT_TRUE(cpu_job(c, 4));
}

TEST(CpuFeatures, TheFileOverrideIsReadAndAMissingOneIsNamed) {
  const xlaunch::test::ScratchDir scratch;
  setenv("XLAUNCH_CPUINFO_FILE", xlaunch::test::write_cpuinfo(scratch.path + "/cpuinfo", xlaunch::test::kCpuinfoAvx2).c_str(), 1);
  EXPECT_TRUE(this_cpu_features().known);
  EXPECT_FALSE(this_cpu_features().avx512_bf16);
  setenv("XLAUNCH_CPUINFO_FILE", (scratch.path + "/missing").c_str(), 1);
  try {
    this_cpu_features();
    ADD_FAILURE() << "no error for a missing XLAUNCH_CPUINFO_FILE";
  } catch (const LaunchError& e) {
    EXPECT_NE(std::string(e.what()).find("XLAUNCH_CPUINFO_FILE=" + scratch.path + "/missing cannot be read"),
              std::string::npos)
        << e.what();
  }
  unsetenv("XLAUNCH_CPUINFO_FILE");
}
