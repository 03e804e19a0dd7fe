// The utilization a tracker logs over time (docs/tracking.md): every report_interval optimizer
// steps, each rank's step-clock totals since its last report (the counters the end-of-job report
// reads, status/step_stats.h) travel to the main process in one allgather of kFields numbers per
// rank, which turns them into the xlaunch/... scalars. Pure functions, tested with literal totals.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "track/backend.h"
#include "xlaunch/status/step_stats.h"

namespace xlaunch::track {

// One rank's measurements over an interval, as the numbers the allgather carries.
enum Field : int {
  kSteps, kSamples, kWallNs,
  kPhaseNs,                               // kPhases of them: data_wait, forward, ... other
  kCpuNs = kPhaseNs + profile::kPhases,   // the process's CPU time (all its threads)
  kGpuNs,                                 // device time of the phases (CUDA events); 0 on CPUs
  kHasGpu,                                // 1 on a rank that trains on a GPU
  kGpuSm,                                 // NVML's SM utilization in percent; -1: none
  kFields
};
using RankInterval = std::array<double, kFields>;

// What `now` adds to `before` (both cumulative totals of one rank); gpu_sm as NVML gave it over
// the interval, or nothing.
RankInterval interval_between(const profile::Totals& before, const profile::Totals& now, bool on_gpu,
                              std::optional<double> gpu_sm);

// The scalars the ranks' intervals make, all at one step:
//   xlaunch/steps_per_s     steps over the interval's wall time (the mean over ranks)
//   xlaunch/samples_per_s   samples the prepared loaders handed over per second, summed over ranks
//   xlaunch/<phase>         the share of step time in each phase (data_wait, forward, backward,
//                           comm_wait, optimizer, other), 0 to 1, the mean over ranks
//   xlaunch/data_wait_max, xlaunch/comm_wait_max   the largest share on any rank (a straggler)
//   xlaunch/cpu_cores       CPU time over wall time (cores kept busy), the mean over ranks
//   xlaunch/gpu_busy        device time of the phases over wall time, GPU ranks only
//   xlaunch/gpu_sm          NVML's SM utilization in percent, GPU ranks NVML answered for
// Ranks with no step in the interval are left out; none at all gives no scalars.
std::vector<Scalar> utilization_scalars(const std::vector<RankInterval>& ranks);

// Every tag utilization_scalars may give, in its order (the columns of xlaunch.csv).
const std::vector<std::string>& utilization_tags();

}  // namespace xlaunch::track
