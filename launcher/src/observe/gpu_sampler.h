// GPU use through NVML (xlaunch/status/nvml_api.h: libnvidia-ml.so.1, or the library
// XLAUNCH_NVML_LIBRARY names, loaded at run time). A thread samples every GPU of this machine about
// 10 times a second while the job runs, and names each by its PCI bus id (nvmlDeviceGetPciInfo_v3),
// by which the report finds the GPU each rank published. Without NVML (no driver, no GPU) there
// are no samples and the report's GPU columns show "-".
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "observe/report.h"

namespace xlaunch::launcher {

struct GpuSample {
  double sm_pct = 0, mem_used_gib = 0, mem_total_gib = 0, power_w = 0;
  bool sm_ok = false, mem_ok = false, power_ok = false;  // NVML answered
};

class GpuSampler {
 public:
  explicit GpuSampler(double interval_s = 0.1);
  ~GpuSampler();  // stops the thread
  GpuSampler(const GpuSampler&) = delete;
  GpuSampler& operator=(const GpuSampler&) = delete;

  bool available() const { return gpus_ > 0; }
  std::string why_unavailable() const { return why_; }
  // The latest sample of each GPU (empty when unavailable).
  std::vector<GpuSample> latest() const;
  // The mean over every sample so far, per GPU in NVML's order, each with its bus id and this
  // machine's host name (empty when unavailable).
  std::vector<GpuUse> mean() const;
  // The mean over the samples taken since t0 (CLOCK_REALTIME seconds) that the history still
  // holds: the report's window rather than the whole job. Falls back to mean() when none is.
  std::vector<GpuUse> mean_since(double t0) const;
  // The last kHistory samples: (CLOCK_REALTIME in seconds, per GPU), for the timeline's counters.
  std::vector<std::pair<double, std::vector<GpuSample>>> history() const;
  void stop();

 private:
  struct Api;
  void loop(double interval_s);
  void sample();
  std::unique_ptr<Api> api_;
  int gpus_ = 0;
  std::string why_;
  std::string host_;  // this machine's name, as the ranks publish theirs (gethostname)
  static constexpr size_t kHistory = 6000;  // 10 minutes at 10 Hz
  mutable std::mutex mu_;
  std::vector<std::pair<double, std::vector<GpuSample>>> samples_;  // a ring of kHistory
  size_t next_ = 0;                                                 // where the next sample goes
  std::vector<GpuUse> sums_;                                        // of every sample that read
  std::vector<int> sm_reads_, mem_reads_, power_reads_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace xlaunch::launcher
