// A rank naming its GPU in its stats (profile/job_profile.h's publish_cuda_device), for the
// report's NVML attribution (docs/performance.md). Where a GPU runs: every visible CUDA device is
// published by its PCI bus id in NVML's form, the stats file holds it, and one line per device
// ("cuda device D bus id ID") lets scripts/gpu/nvml_attribution.sh compare with nvidia-smi under a
// shuffled CUDA_VISIBLE_DEVICES. Everywhere: a device CUDA cannot name publishes nothing, keeps
// what was published, and leaves no CUDA error set for the next launch check to report.
#include <gtest/gtest.h>

#include <iostream>

#if XLAUNCH_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "profile/job_profile.h"
#include "profile/step_clock.h"
#include "scratch_dir.h"
#include "xlaunch/status/step_stats.h"

namespace {

namespace profile = xlaunch::profile;
namespace status = xlaunch::status;

TEST(PublishGpu, EachVisibleDeviceByItsBusIdAndNoErrorLeftSet) {
  xlaunch::test::ScratchDir dir;
  profile::ClockSettings c;
  c.dir = dir.path;
  profile::start(c);
  ASSERT_TRUE(status::read_stats_file(dir.path, 0).has_value()) << "the stats file of rank 0 in " << dir.path;
  int devices = 0;
#if XLAUNCH_HAVE_CUDA
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
  (void)cudaGetLastError();
#endif
  std::string last;
  for (int d = 0; d < devices; ++d) {
    const std::string id = profile::publish_cuda_device(d);
#if XLAUNCH_HAVE_CUDA
    char cuda_id[32] = {};
    ASSERT_EQ(cudaDeviceGetPCIBusId(cuda_id, sizeof cuda_id, d), cudaSuccess);
    EXPECT_EQ(id, status::normalize_pci_bus_id(cuda_id)) << "CUDA says " << cuda_id;
#endif
    ASSERT_FALSE(id.empty()) << "CUDA device " << d;
    EXPECT_EQ(status::read_stats_file(dir.path, 0)->bus_id(), id);
    std::cout << "cuda device " << d << " bus id " << id << std::endl;
    last = id;
  }
  // A device CUDA cannot name (here: one past the last; on a machine without a GPU, device 0).
  EXPECT_EQ(profile::publish_cuda_device(devices), "");
  EXPECT_EQ(status::read_stats_file(dir.path, 0)->bus_id(), last) << "a failed query keeps what was published";
#if XLAUNCH_HAVE_CUDA
  // Where CUDA could not start (no driver), every call returns that error, cudaGetLastError too:
  // there is nothing to clear. With a device, the invalid index's error must be gone.
  if (devices > 0) EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "the tolerated error must be cleared";
#endif
  if (devices == 0) std::cout << "no CUDA device visible: only the failure path ran" << std::endl;
}

}  // namespace
