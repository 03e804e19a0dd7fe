// While a job runs: reads every rank's stats file (xlaunch/status/step_stats.h) once a second, keeps the
// job's steps/s over time (for report.html), and with `xlaunch run --monitor SECONDS` prints one
// line every SECONDS: steps/s, samples/s, the phase split over all ranks since the last line, and
// each GPU's SM use, memory and power (nvml.h).
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "observe/nvml.h"

namespace xlaunch::launcher {

struct RatePoint {
  double t_s = 0;          // seconds since the job started
  double steps_per_s = 0;  // rank 0's, over the last interval
};

class JobMonitor {
 public:
  // print_every_s: 0 prints nothing. gpus may be null.
  JobMonitor(std::string status_dir, int world, double print_every_s, const GpuSampler* gpus);
  ~JobMonitor();
  JobMonitor(const JobMonitor&) = delete;
  JobMonitor& operator=(const JobMonitor&) = delete;

  void stop();
  std::vector<RatePoint> rates() const;

 private:
  void loop();
  std::string line(double t_s, double dt_s);

  std::string dir_;
  int world_;
  double print_every_s_;
  const GpuSampler* gpus_;
  std::vector<profile::Totals> last_;  // per rank, at the last line
  profile::Totals last_rate_;          // rank 0's, at the last rate point
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::vector<RatePoint> rates_;
  std::thread thread_;
};

}  // namespace xlaunch::launcher
