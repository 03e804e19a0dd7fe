// What init_trackers leaves in the Accelerator (track/run_tracking.h starts it): the tracker on the
// main process, and on every rank what the next utilization report subtracts from.
#pragma once

#include <memory>
#include <string>

#include "track/gpu_use.h"
#include "track/tracker.h"
#include "xlaunch/status/step_stats.h"

namespace xlaunch {

struct TrackingState {
  std::unique_ptr<track::Tracker> tracker;  // the main process only
  std::string run_dir;                      // <project_dir>/<project_name>
  profile::Totals reported;                 // this rank's totals at the last utilization report
  int64_t reported_step = -1;               // the step of the last utilization report
  std::unique_ptr<track::GpuUse> gpu;       // this rank's GPU's SM use (NVML), on GPU ranks
  bool drain_gave_up = false;               // a save's drain hit its bound: later saves do not wait
};

}  // namespace xlaunch
