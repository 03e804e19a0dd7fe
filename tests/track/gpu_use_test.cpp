// A rank's own GPU use (runtime/src/track/gpu_use.h) against the stand-in NVML of
// tests/report/fake_nvml.c (four GPUs at buses 1b, 3d, 88, b2; utilization 42, 97, 61, 13%), whose
// driver samples each test puts there itself; and the cases with nothing to log.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include "track/gpu_use.h"

using xlaunch::track::GpuUse;

namespace {

// The stand-in library, opened by the test too: the same loaded copy GpuUse opens (dlopen gives
// one copy per path), so that its controls reach what GpuUse reads.
class FakeNvml : public ::testing::Test {
 protected:
  void SetUp() override {
    lib_ = dlopen(FAKE_NVML, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(lib_, nullptr) << dlerror();
    reset_ = reinterpret_cast<void (*)()>(dlsym(lib_, "fake_nvml_reset"));
    add_ = reinterpret_cast<void (*)(unsigned, unsigned long long, unsigned)>(dlsym(lib_, "fake_nvml_add_sample"));
    mig_ = reinterpret_cast<void (*)(unsigned, unsigned)>(dlsym(lib_, "fake_nvml_set_mig"));
    samples_ = reinterpret_cast<void (*)(int)>(dlsym(lib_, "fake_nvml_set_samples_supported"));
    ASSERT_TRUE(reset_ && add_ && mig_ && samples_) << "fake_nvml.c lacks its controls";
    reset_();
  }
  void TearDown() override {
    if (lib_) dlclose(lib_);
  }

  void* lib_ = nullptr;
  void (*reset_)() = nullptr;
  void (*add_)(unsigned gpu, unsigned long long t_us, unsigned pct) = nullptr;
  void (*mig_)(unsigned gpu, unsigned on) = nullptr;
  void (*samples_)(int on) = nullptr;
};

}  // namespace

TEST_F(FakeNvml, TheMeanOfTheDriversSamplesSinceTheLastCall) {
  add_(1, 100, 50);  // before the GpuUse: not counted
  GpuUse use("0000:3d:00.0", FAKE_NVML);  // CUDA's form of GPU 1's bus id
  add_(1, 200, 10), add_(1, 300, 20), add_(1, 400, 60);
  add_(0, 500, 99);  // another GPU's
  ASSERT_EQ(use.sm_pct(), 30.0) << use.why_nothing();
  // No sample since: the driver's last period, as nvmlDeviceGetUtilizationRates gives it.
  EXPECT_EQ(use.sm_pct(), 97.0);
  add_(1, 600, 80);
  EXPECT_EQ(use.sm_pct(), 80.0);
  EXPECT_EQ(use.why_nothing(), "");
}

TEST_F(FakeNvml, EachSampleCountsOnceWhenTheDriversRingWraps) {
  GpuUse use("00000000:88:00.0", FAKE_NVML);
  for (unsigned i = 1; i <= 6; ++i) add_(2, i * 100, 10);
  ASSERT_EQ(use.sm_pct(), 10.0) << use.why_nothing();
  // Four more: the ring of 8 wraps, and lists 900, 1000, 300, ..., 800: not in time order.
  for (unsigned i = 7; i <= 10; ++i) add_(2, i * 100, 30);
  EXPECT_EQ(use.sm_pct(), 30.0);
  add_(2, 1100, 70);
  EXPECT_EQ(use.sm_pct(), 70.0) << "the newest sample, not the ring's last, marks what was counted";
}

TEST_F(FakeNvml, WithoutTheDriversSamplesTheLastPeriod) {
  samples_(0);
  GpuUse use("0000:88:00.0", FAKE_NVML);
  EXPECT_EQ(use.sm_pct(), 61.0) << use.why_nothing();
}

TEST_F(FakeNvml, AMigSliceHasNothingAndSaysWhyOnce) {
  mig_(3, 1);
  GpuUse use("0000:b2:00.0", FAKE_NVML);
  EXPECT_FALSE(use.sm_pct().has_value());
  const std::string why = use.why_nothing();
  EXPECT_NE(why.find("00000000:B2:00.0 is split into MIG slices"), std::string::npos) << why;
  EXPECT_FALSE(use.sm_pct().has_value());
  EXPECT_EQ(use.why_nothing(), "") << "said once";
}

TEST_F(FakeNvml, AReadingNvmlRefusesIsNothingUntilItAnswersAgain) {
  GpuUse use("0000:1b:00.0", FAKE_NVML);
  ASSERT_EQ(use.sm_pct(), 42.0) << use.why_nothing();
  mig_(0, 1);  // refused from now on (as a GPU switched to MIG mode would be)
  EXPECT_FALSE(use.sm_pct().has_value());
  const std::string why = use.why_nothing();
  EXPECT_NE(why.find("NVML refused the utilization of the GPU at 00000000:1B:00.0"), std::string::npos) << why;
  EXPECT_NE(why.find("Not Supported"), std::string::npos) << why;
  EXPECT_FALSE(use.sm_pct().has_value());
  EXPECT_EQ(use.why_nothing(), "");
  mig_(0, 0);
  EXPECT_EQ(use.sm_pct(), 42.0);
}

TEST_F(FakeNvml, AGpuNvmlDoesNotListHasNothing) {
  GpuUse use("0000:42:00.0", FAKE_NVML);
  EXPECT_FALSE(use.sm_pct().has_value());
  const std::string why = use.why_nothing();
  EXPECT_NE(why.find("lists no GPU at PCI bus id 00000000:42:00.0"), std::string::npos) << why;
}

TEST(GpuUse, ACpuRankHasNothingAndSaysWhyOnce) {
  GpuUse use("", FAKE_NVML);
  EXPECT_FALSE(use.sm_pct().has_value());
  EXPECT_NE(use.why_nothing().find("trains on the CPU"), std::string::npos);
  EXPECT_EQ(use.why_nothing(), "");
}

TEST(GpuUse, WithoutNvmlNothing) {
  GpuUse use("0000:3d:00.0", "/nonexistent/libnvidia-ml.so.1");
  EXPECT_FALSE(use.sm_pct().has_value());
  const std::string why = use.why_nothing();
  EXPECT_NE(why.find("NVML (/nonexistent/libnvidia-ml.so.1) not found"), std::string::npos) << why;
}

TEST(GpuUse, TheLibraryComesFromXlaunchNvmlLibraryByDefault) {
  setenv("XLAUNCH_NVML_LIBRARY", FAKE_NVML, 1);
  GpuUse use("0000:88:00.0");
  EXPECT_TRUE(use.sm_pct().has_value()) << use.why_nothing();
  unsetenv("XLAUNCH_NVML_LIBRARY");
}
