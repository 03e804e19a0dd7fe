// The report's line on host-device synchronisations (docs/performance.md#host-device-syncs): with
// debug: true on a GPU each rank counts the synchronising calls of its training loop per optimizer
// step (runtime/src/profile/sync_count.h) into syncs-<rank> (xlaunch/status/sync_stats.h); `xlaunch
// run` reads them over the report's window (the steps after the warm-up, as the utilization table)
// and prints how many per step, where the first came from, and how to remove them; the syncs the
// runtime itself makes (fp16 loss scaling's check, ...) apart, saying what they are.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "xlaunch/status/sync_stats.h"

namespace xlaunch::launcher {

struct RankSyncs {
  int rank = 0;
  uint64_t steps = 0;      // the rank's steps in the window
  uint64_t syncs = 0;      // its synchronising calls in them
  double per_step = 0;     // syncs / steps; 0 without steps
  uint64_t first_step = 0; // the step (1-based) `first` happened in; 0: none recorded
  std::string first;       // where it came from: the window's first when recorded, else the run's
  // The runtime's own syncs in the same steps (not in `syncs`), and what they are.
  uint64_t runtime_syncs = 0;
  double runtime_per_step = 0;
  std::string runtime_what;
};

// A rank's counts over the window that starts after `warmup` steps (JobReport::first_step - 1).
// The site shown is the first sync of the window when the rank recorded it (its first of the run, or
// its first after step kWarmupSteps), else the run's first, which the step number then places
// before the window.
RankSyncs summarize_syncs(const profile::SyncStats& s, uint64_t warmup);

// The ranks of 0..world-1 that counted (their file is in status_dir), summarised; empty when none did.
std::vector<RankSyncs> read_syncs(const std::string& status_dir, int world, uint64_t warmup);

// "host-device syncs: 1 per step on rank 0 (first: step 11, at::_ops::item::call called from
// train+0x1a2b); remove it: ..." for the rank with the most per step (and the others' range when
// they differ), then "; and 1 per step made by xlaunch itself (WHAT)" when the runtime made some;
// "host-device syncs: 1 per step on rank 0, all made by xlaunch itself (WHAT); none by the training
// loop" when only the runtime did; "host-device syncs: none in the steps after the warm-up (...)"
// when the ranks counted none; "" when no rank counted (no window, or debug off, or a CPU job).
std::string syncs_line(const std::vector<RankSyncs>& ranks);

// The same per rank as a JSON array (report.json's "host_device_syncs").
nlohmann::ordered_json syncs_json(const std::vector<RankSyncs>& ranks);

}  // namespace xlaunch::launcher
