// The utilization report of each attempt of `xlaunch run` (report.h), the operator tables
// (op_table_print.h; printed with report: false too) and the timeline (timeline.h): the AttemptObserver
// that samples the GPUs and runs the --monitor line while the attempt runs, and reports when it ends;
// when it failed, also every rank's last collectives (flight_report.h).
#pragma once

#include <memory>
#include <string>

#include "launch/attempts.h"
#include "observe/monitor.h"
#include "observe/gpu_sampler.h"

namespace xlaunch::launcher {

class AttemptReport : public AttemptObserver {
 public:
  // monitor_s: `xlaunch run --monitor`'s seconds between lines; 0: none.
  explicit AttemptReport(double monitor_s) : monitor_s_(monitor_s) {}

  void started(const config::LaunchConfig& c, const std::string& status_dir) override;
  // Never throws: an error is a warning, since the job's outcome matters more than its report.
  void ended() override;
  // The flight recorder of the failed attempt (flight_report.h), printed and, with a log_dir, saved.
  void failed(const std::string& run_id, int attempt) override;

 private:
  double monitor_s_;
  config::LaunchConfig c_;
  std::string status_dir_;
  std::unique_ptr<GpuSampler> gpus_;
  std::unique_ptr<JobMonitor> monitor_;
};

}  // namespace xlaunch::launcher
