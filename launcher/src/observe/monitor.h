// While a job runs: reads every rank's stats file (xlaunch/status/step_stats.h) once a second,
// keeps the job's steps/s over time (for report.html), and with `xlaunch run --monitor SECONDS`
// prints one line every SECONDS, and a last one for the steps since when the job ends: steps/s,
// samples/s, the phase split over all ranks since the last line, and each GPU's SM use, memory and
// power (gpu_sampler.h). Until a rank has taken its first step, a line says the ranks are starting
// instead of showing a rate of zero.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "observe/gpu_sampler.h"

namespace xlaunch::launcher {

struct RatePoint {
  double t_s = 0;          // seconds since the job started
  double steps_per_s = 0;  // rank 0's, over the last interval
};

// Pure: the --monitor line for the interval of dt_s seconds that ends t_s seconds after the job
// started. before[r]: rank r's totals at the last line (zero at the start); now[r]: at this one
// (nullopt: its stats are not visible). "xlaunch: monitor 12s: 3.10 steps/s, 99.2 samples/s |
// data_wait 4% forward 30% ... | gpu0 sm 87% mem 10.2/80.0 GiB 310 W" (steps/s: rank 0's;
// samples/s and the phase split: all ranks'); while no rank has taken a step: "xlaunch: monitor
// 2s: the ranks are starting (1 of 2 up, no step yet)".
std::string monitor_line(double t_s, double dt_s, const std::vector<profile::Totals>& before,
                         const std::vector<std::optional<profile::Totals>>& now, const std::vector<GpuSample>& gpus);

class JobMonitor {
 public:
  // print_every_s: 0 prints nothing. gpus may be null.
  JobMonitor(std::string status_dir, int world, double print_every_s, const GpuSampler* gpus);
  ~JobMonitor();
  JobMonitor(const JobMonitor&) = delete;
  JobMonitor& operator=(const JobMonitor&) = delete;

  // Stops the thread; with --monitor, it prints the last line first (when a step ended since).
  void stop();
  std::vector<RatePoint> rates() const;

 private:
  void loop();
  void print_line(double t_s, double dt_s, bool only_after_steps);

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
