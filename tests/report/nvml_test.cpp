// The NVML sampler against a stand-in library (fake_nvml.c), and without NVML at all.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <thread>

#include "observe/nvml.h"
#include "observe/report.h"

using namespace xlaunch::launcher;

TEST(Nvml, SamplesEveryGpuAndTheReportShowsThem) {
  setenv("XLAUNCH_NVML_LIBRARY", FAKE_NVML, 1);
  GpuSampler s(0.01);
  ASSERT_TRUE(s.available()) << s.why_unavailable();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  s.stop();
  const auto mean = s.mean();
  ASSERT_EQ(mean.size(), 2u);
  EXPECT_DOUBLE_EQ(mean[0].sm_pct, 42);
  EXPECT_DOUBLE_EQ(mean[1].sm_pct, 97);
  EXPECT_DOUBLE_EQ(mean[0].mem_used_gib, 20);
  EXPECT_DOUBLE_EQ(mean[0].mem_total_gib, 80);
  EXPECT_DOUBLE_EQ(mean[1].power_w, 250);
  EXPECT_GE(s.history().size(), 3u);
  // The report's window: the samples since a time; none since then: the whole job's mean.
  EXPECT_DOUBLE_EQ(s.mean_since(0)[1].sm_pct, 97);
  EXPECT_DOUBLE_EQ(s.mean_since(s.history().back().first)[0].sm_pct, 42);
  EXPECT_DOUBLE_EQ(s.mean_since(1e12)[0].sm_pct, 42);
  // Local rank 1 is shown with GPU 1.
  xlaunch::profile::RankStats st;
  st.magic = xlaunch::profile::kStatsMagic;
  st.rank = 0;
  st.local_rank = 1;
  const JobReport r = make_report({st}, mean);
  ASSERT_TRUE(r.ranks[0].gpu.has_value());
  EXPECT_DOUBLE_EQ(r.ranks[0].gpu->sm_pct, 97);
}

TEST(Nvml, WithoutNvmlTheColumnsSayDash) {
  setenv("XLAUNCH_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
  GpuSampler s(0.01);
  EXPECT_FALSE(s.available());
  EXPECT_NE(s.why_unavailable().find("not found"), std::string::npos) << s.why_unavailable();
  EXPECT_TRUE(s.mean().empty());
  EXPECT_TRUE(s.latest().empty());
}
