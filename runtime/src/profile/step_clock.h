// Where each optimizer step's time goes, per rank, always on (XLAUNCH_REPORT=0 turns it off):
// the prepared loader, model, backward and optimizer mark their phases with PhaseScope; the
// prepared optimizer's step ends the step. Each mark reads the monotonic clock (some 20 ns) and
// the step's end writes one record into the rank's shared stats file (step_stats.h), which
// `xlaunch run` reads for --monitor and the report. No device synchronization, ever: on CUDA the
// phases are host time (what the training loop waits for); the GPU's own busy time comes from
// NVML in the launcher.
#pragma once

#include <cstdint>
#include <string>

#include "xlaunch/status/step_stats.h"

namespace xlaunch::profile {

struct ClockSettings {
  std::string dir;  // the status directory; empty: the stats stay in this process
  int rank = 0, world = 1, local_rank = 0;
  bool enabled = true;
};

// Once per process, before the first step (from start_job_watch).
void start(const ClockSettings& s);

// The training thread's phases. Time is exclusive: a phase inside another (the communication wait
// at the end of backward) is taken out of the outer one. Scopes on other threads are not counted.
class PhaseScope {
 public:
  explicit PhaseScope(Phase p);
  ~PhaseScope();
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  bool counted_;
  uint64_t start_ns_ = 0;
  Phase phase_;
};

void add_samples(uint64_t n);             // a prepared loader handed over a batch of n samples
void collective_done(uint64_t bytes);     // any thread: a collective over `bytes` finished
void step_done(int64_t step);             // the prepared optimizer stepped (step: steps so far)

// ZeRO (ddp.zero_stage >= 1; RankStats::zero): the step that ends next, at `stage`, reduce-scattered
// and gathered these bytes (the prepared optimizer that ends the report's step calls it before
// step_done); and a prepared optimizer's state, once after its first step, adds `bytes`. Published
// with the next step_done. Training thread.
void zero_step(int stage, uint64_t reduce_scattered_bytes, uint64_t gathered_bytes);
void zero_state(uint64_t bytes);

// This rank's GPU, by PCI bus id, in its stats (status::set_gpu_bus_id); nothing when the clock
// is off. See job_profile.h's publish_cuda_device.
void set_gpu_bus_id(const std::string& bus_id);

// Whether the clock records steps (XLAUNCH_REPORT, and start() has run).
bool enabled();

// This rank's stats (tests; the launcher reads the file).
const RankStats& stats();

uint64_t monotonic_ns();
uint64_t realtime_ns();

}  // namespace xlaunch::profile
