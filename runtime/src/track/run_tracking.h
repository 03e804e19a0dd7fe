// Experiment tracking during training (docs/tracking.md), as Accelerator::init_trackers, log and
// end_training drive it: starting the trackers, reducing logged values over the ranks, the ranks'
// utilization at the step boundary, histograms after an optimizer step, a resumption after
// load_state. The Accelerator keeps the TrackingState and hands each call what it needs.
#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "track/tracking_state.h"
#include "xlaunch/extend/communicator.h"
#include "xlaunch/tracking.h"

namespace xlaunch::track {

// What init_trackers decides with: the Accelerator's settings and where the run stands.
struct TrackingSetup {
  std::vector<std::string> log_with;  // tracker names (AcceleratorOptions::split_log_with)
  std::string project_dir;
  int64_t report_interval = 0;
  int64_t log_histograms_every_n_steps = 0;
  bool cuda = false;        // this rank trains on a GPU: its SM use is sampled
  int64_t step = 0;         // optimizer steps so far
  std::string loaded_from;  // the checkpoint load_state loaded last ("" when none)
};

// Starts the trackers (on comm's rank 0) after the ranks agreed on the settings; every refusal is
// every rank's (UsageError). Collective over `comm`, the CPU communicator. Null when log_with
// names no tracker (said on the main process).
std::unique_ptr<TrackingState> start_tracking(Communicator& comm, const TrackingSetup& setup,
                                              const std::string& project_name, const HParams& config);

// `values` reduced over the ranks of `comm` (LogReduce::Mean, Sum or Max): one allgather of at
// most 256 numbers per rank. Every rank must pass the same names: a mismatch throws UsageError on
// every rank, as does reducing with `uneven` inputs (a joined rank cannot take part).
LogValues reduce_logged(Communicator& comm, const LogValues& values, int64_t step, LogReduce reduce, bool uneven);

// The ranks' utilization since the last report, logged every `report_interval` steps (one small
// allgather at that step's boundary on every rank).
void report_utilization(TrackingState& t, Communicator& comm, int64_t step, int64_t report_interval, bool cuda);

// Histograms of every model's weights and gradients, every `every` steps (the main process).
void log_histograms(TrackingState& t, int64_t step, int64_t every, const std::vector<const torch::nn::Module*>& models);

// Waits (bounded) until the trackers have written what they hold; after one wait hits its bound,
// later ones do not wait.
void drain(TrackingState& t);

// After load_state of `checkpoint`: the next report starts from here, and the trackers say so.
void resumed(TrackingState& t, int64_t step, const std::string& checkpoint);

}  // namespace xlaunch::track
