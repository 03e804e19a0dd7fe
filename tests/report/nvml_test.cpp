// The NVML sampler against a stand-in library (fake_nvml.c), and without NVML at all; which GPU
// the report gives each rank, from the stats files the ranks leave (docs/performance.md).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>

#include "launch/machine.h"
#include "observe/gpu_sampler.h"
#include "observe/report.h"
#include "scratch_dir.h"
#include "xlaunch/status/step_stats.h"

using namespace xlaunch::launcher;

std::string this_host() {
  char h[sizeof(xlaunch::profile::RankStats::host)] = {};
  gethostname(h, sizeof h - 1);
  return h;
}

TEST(Nvml, SamplesEveryGpuWithItsBusId) {
  setenv("XLAUNCH_NVML_LIBRARY", FAKE_NVML, 1);
  GpuSampler s(0.01);
  ASSERT_TRUE(s.available()) << s.why_unavailable();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  s.stop();
  const auto mean = s.mean();
  ASSERT_EQ(mean.size(), 4u);
  EXPECT_DOUBLE_EQ(mean[0].sm_pct, 42);
  EXPECT_DOUBLE_EQ(mean[1].sm_pct, 97);
  EXPECT_DOUBLE_EQ(mean[0].mem_used_gib, 20);
  EXPECT_DOUBLE_EQ(mean[0].mem_total_gib, 80);
  EXPECT_DOUBLE_EQ(mean[1].power_w, 250);
  EXPECT_EQ(mean[2].bus_id, "00000000:88:00.0");
  EXPECT_EQ(mean[3].host, this_host());
  EXPECT_GE(s.history().size(), 3u);
  // The report's window: the samples since a time; none since then: the whole job's mean.
  EXPECT_DOUBLE_EQ(s.mean_since(0)[1].sm_pct, 97);
  EXPECT_EQ(s.mean_since(0)[1].bus_id, "00000000:3D:00.0");
  EXPECT_DOUBLE_EQ(s.mean_since(s.history().back().first)[0].sm_pct, 42);
  EXPECT_DOUBLE_EQ(s.mean_since(1e12)[0].sm_pct, 42);
}

// A status directory with the stats files the ranks of a job would leave. The stand-in NVML lists
// four GPUs in PCI order (buses 1b, 3d, 88, b2: SM 42, 97, 61, 13%); CUDA numbers them otherwise
// (here b2, 1b, 88, 3d, as FASTEST_FIRST may), and the job ran with CUDA_VISIBLE_DEVICES=2,0,3, so
// local ranks 0, 1, 2 train on CUDA's devices 2, 0, 3: the GPUs at buses 88, b2, 3d. Each rank
// publishes the bus id CUDA gives its device 0..2 (cudaDeviceGetPCIBusId's form). Rank 3 runs on
// another machine (a GPU at bus 1b there), rank 4 on the CPU, rank 5 on a runtime of format 2.
class NvmlAttribution : public xlaunch::test::ScratchDirTest<> {
 protected:
  static std::vector<std::string> cuda_bus_order() { return {"0000:b2:00.0", "0000:1b:00.0", "0000:88:00.0", "0000:3d:00.0"}; }

  void write_rank(int rank, int local_rank, const std::string& host, const std::string& cuda_bus_id) {
    std::string why;
    xlaunch::profile::RankStats* st = xlaunch::status::create_stats_file(dir_, rank, &why);
    ASSERT_NE(st, nullptr) << why;
    st->rank = rank;
    st->world = 6;
    st->local_rank = local_rank;
    std::snprintf(st->host, sizeof st->host, "%s", host.c_str());
    if (!cuda_bus_id.empty()) xlaunch::status::set_gpu_bus_id(st, cuda_bus_id);
    st->magic = xlaunch::profile::kStatsMagic;
  }

  // What an older runtime left: format 2's layout (no bus id), format 2's magic.
  void write_format2_rank(int rank, int local_rank) {
    auto st = std::make_unique<xlaunch::profile::RankStats>();
    st->magic = xlaunch::profile::kStatsMagicV2;
    st->rank = rank;
    st->world = 6;
    st->local_rank = local_rank;
    std::snprintf(st->host, sizeof st->host, "%s", this_host().c_str());
    st->total.steps = 7;
    const std::string path = dir_ + "/stats-" + std::to_string(rank);
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
    ASSERT_GE(fd, 0) << path;
    ASSERT_EQ(write(fd, reinterpret_cast<const char*>(st.get()), xlaunch::profile::kStatsV2Bytes),
              static_cast<ssize_t>(xlaunch::profile::kStatsV2Bytes));
    close(fd);
  }
};

TEST_F(NvmlAttribution, EachRankGetsTheGpuItPublishedAndOtherMachinesStayBlank) {
  setenv("XLAUNCH_NVML_LIBRARY", FAKE_NVML, 1);
  GpuSampler sampler(0.01);
  ASSERT_TRUE(sampler.available()) << sampler.why_unavailable();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  sampler.stop();
  const std::vector<GpuUse> gpus = sampler.mean();
  ASSERT_EQ(gpus.size(), 4u);

  const std::vector<int> visible = {2, 0, 3};  // CUDA_VISIBLE_DEVICES=2,0,3
  for (int local = 0; local < 3; ++local) write_rank(local, local, this_host(), cuda_bus_order()[visible[local]]);
  write_rank(3, 0, "another-machine", cuda_bus_order()[1]);
  write_rank(4, 3, this_host(), "");
  write_format2_rank(5, 1);

  std::vector<std::optional<xlaunch::profile::RankStats>> stats;
  for (int r = 0; r < 6; ++r) {
    stats.push_back(xlaunch::status::read_stats_file(dir_, r));
    ASSERT_TRUE(stats.back().has_value()) << "rank " << r << "'s stats file is not readable";
  }
  EXPECT_EQ(stats[0]->bus_id(), "00000000:88:00.0") << "published in NVML's form";
  EXPECT_EQ(stats[5]->total.steps, 7u) << "a format 2 file is read whole";
  EXPECT_EQ(stats[5]->bus_id(), "");

  const JobReport r = make_report(stats, gpus);
  const double expected_sm[3] = {61, 13, 97};  // buses 88, b2, 3d
  for (int rank = 0; rank < 3; ++rank) {
    ASSERT_TRUE(r.ranks[rank].gpu.has_value()) << "rank " << rank;
    EXPECT_DOUBLE_EQ(r.ranks[rank].gpu->sm_pct, expected_sm[rank]) << "rank " << rank;
    // What the local rank alone would have given: another GPU, so this test tells the two apart.
    EXPECT_NE(gpus[static_cast<size_t>(stats[rank]->local_rank) % gpus.size()].sm_pct, expected_sm[rank]);
  }
  EXPECT_FALSE(r.ranks[3].gpu.has_value()) << "a rank on another machine: blank, not this machine's GPU at its bus";
  EXPECT_FALSE(r.ranks[4].gpu.has_value()) << "a CPU rank publishes no GPU";
  EXPECT_FALSE(r.ranks[5].gpu.has_value()) << "an older runtime's rank published no GPU";
  EXPECT_EQ(r.gpu_host, this_host());

  const std::string text = format_report(r);
  EXPECT_NE(text.find("rank 3 ran on other machines than " + this_host()), std::string::npos) << text;
  const std::string json = report_json(r);
  EXPECT_NE(json.find("\"gpu_bus_id\": \"00000000:B2:00.0\""), std::string::npos) << json;
}

TEST(NvmlAttributionUnits, BusIdsAreNormalizedToNvmlsForm) {
  using xlaunch::status::normalize_pci_bus_id;
  EXPECT_EQ(normalize_pci_bus_id("0000:3b:00.0"), "00000000:3B:00.0");      // cudaDeviceGetPCIBusId
  EXPECT_EQ(normalize_pci_bus_id("00000000:3B:00.0"), "00000000:3B:00.0");  // NVML
  EXPECT_EQ(normalize_pci_bus_id("0001:c1:1f.7"), "00000001:C1:1F.7");
  EXPECT_EQ(normalize_pci_bus_id("3b:00.0"), "00000000:3B:00.0");            // lspci, no domain
  for (const char* bad : {"", "GPU-5c1a", "0000:3b:00", "0000:3b:20.0", "0000:3b:00.8", "0000:3b:00.0 ",
                          " 0000:3b:00.0", "0x0:3b:00.0", "000000000:3b:00.0", "0000:13b:00.0"})
    EXPECT_EQ(normalize_pci_bus_id(bad), "") << "'" << bad << "'";
}

TEST(NvmlAttributionUnits, AStatsFileOfAnUnknownFormatIsNotRead) {
  xlaunch::test::ScratchDir dir;
  std::string why;
  xlaunch::profile::RankStats* st = xlaunch::status::create_stats_file(dir.path, 0, &why);
  ASSERT_NE(st, nullptr) << why;
  st->magic = xlaunch::profile::kStatsMagicV2;  // format 4's size with format 2's magic: neither
  EXPECT_FALSE(xlaunch::status::read_stats_file(dir.path, 0).has_value());
  st->magic = xlaunch::profile::kStatsMagic;
  EXPECT_TRUE(xlaunch::status::read_stats_file(dir.path, 0).has_value());
}

// `xlaunch env`'s list of GPUs reads the same NVML, through the same loader (nvml_api.h).
TEST(Nvml, TheMachinesGpusComeFromTheSameNvml) {
  setenv("XLAUNCH_NVML_LIBRARY", FAKE_NVML, 1);
  unsetenv("CUDA_VISIBLE_DEVICES");
  const GpuReport r = detect_gpus();
  ASSERT_EQ(r.gpus.size(), 4u) << r.source;
  EXPECT_EQ(r.source, "NVML");
  EXPECT_EQ(r.gpus[2].name, "Fake GPU 2");
  EXPECT_EQ(r.gpus[3].memory_bytes, 80ull << 30);
  EXPECT_EQ(r.driver, "999.1");
}

TEST(Nvml, WithoutNvmlTheColumnsSayDash) {
  setenv("XLAUNCH_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
  GpuSampler s(0.01);
  EXPECT_FALSE(s.available());
  EXPECT_NE(s.why_unavailable().find("not found"), std::string::npos) << s.why_unavailable();
  EXPECT_TRUE(s.mean().empty());
  EXPECT_TRUE(s.latest().empty());
}
