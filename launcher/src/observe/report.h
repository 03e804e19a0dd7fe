// The utilization report `xlaunch run` prints when a job ends (docs/performance.md): per rank,
// over the steady-state steps (after the warm-up), steps/s, samples/s, where the step's wall time
// went (xlaunch/status/step_stats.h), CPU and GPU use; then advice lines, each naming the measurement,
// the knob and the expected effect. The same numbers go to report.json.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "observe/host_facts.h"
#include "observe/syncs.h"
#include "xlaunch/config/launch_config.h"
#include "xlaunch/status/op_table.h"
#include "xlaunch/status/step_stats.h"

namespace xlaunch::launcher {

// GPU use over the job, from NVML (gpu_sampler.h): per GPU of the machine the launcher runs on.
struct GpuUse {
  double sm_pct = 0;  // -1: NVML does not report it (a MIG slice)
  double mem_used_gib = 0, mem_total_gib = 0, power_w = 0;
  // Which GPU of which machine: its PCI bus id as NVML gives it (status::normalize_pci_bus_id's
  // form; empty when NVML does not say) and the host name of the machine NVML sampled.
  std::string bus_id, host;
};

struct RankReport {
  int rank = 0;
  bool present = false;  // its stats were readable (a rank on a machine without a shared log_dir: no)
  std::string host;
  uint64_t steps = 0;    // in the window
  double steps_per_s = 0, samples_per_s = 0;
  double phase_pct[profile::kPhases] = {};
  double step_ms = 0;    // mean wall time of a step
  double busy_ms = 0;    // mean step time spent on its own work: wall minus the wait for collectives
  double cpu_pct = 0;    // CPU time over wall time, all threads (100 = one core)
  double collectives_per_step = 0, mb_per_step = 0;
  double gpu_ms_per_step[profile::kPhases] = {};  // device time per phase (CUDA events); 0 on CPUs
  std::string gpu_bus_id;     // the GPU the rank published (its stats); empty on CPUs
  std::optional<GpuUse> gpu;  // that GPU's use, when it is one of the sampled machine's GPUs
  // ZeRO (ddp.zero_stage >= 1; RankStats::zero), over every step of the run: this rank's optimizer
  // state, and the bytes it reduce-scattered and gathered per optimizer step. 0: stage 0, or an
  // older runtime's stats.
  int zero_stage = 0;
  double optimizer_state_bytes = 0, reduce_scattered_bytes_per_step = 0, gathered_bytes_per_step = 0;
};

struct JobReport {
  int world = 0;
  uint64_t first_step = 0, last_step = 0, total_steps = 0;  // the window, 1-based and inclusive
  std::vector<RankReport> ranks;
  std::string gpu_host;  // the machine whose GPUs were sampled; empty when none was
  // The machine `xlaunch run` ran on (cmd_run fills it before advise): its cores bound the gain of
  // more loader workers, its CPU's flags say whether mixed precision pays on a CPU job. Left empty
  // (not known), the advice makes neither judgement.
  HostFacts launcher_host;
  std::vector<std::string> advice;
  std::vector<RankSyncs> syncs;  // host-device syncs of the ranks that counted them (syncs.h); usually none
  std::vector<status::OpTable> operators;  // profile_ops: the ranks' operator tables (xlaunch/status/op_table.h)
};

// Thresholds of the advice (docs/performance.md). kWorkerGain: more loader workers are proposed
// only when the idle cores let them make steps at least this much faster.
inline constexpr double kDataWaitPct = 10, kCommWaitPct = 15, kStragglerRatio = 1.10, kGpuSmPct = 70,
                        kGpuMemPct = 50, kWorkerGain = 1.2, kOptimizerPct = 20;
// The fused AdamW step's speed over LibTorch's, the least measured (docs/benchmarks.md, optim.sh:
// 3.41 to 4.53): what rule 7's bound on the gain rests on.
inline constexpr double kFusedOptimizerSpeedup = 3.4;

// When the report's window began (CLOCK_REALTIME seconds): the end of the warm-up steps as far as
// the stats still tell, else the first step's start. 0 without steps.
double window_start_s(const profile::RankStats& s);

// stats[r]: rank r's, or nullopt. gpus: the sampled GPUs, may be empty. Rank r is given the GPU
// whose host and bus id are those it published (RankStats::host, gpu_bus_id): what CUDA made of
// CUDA_VISIBLE_DEVICES, gpu_ids and its own device order, not a guess from the local rank. A rank
// that published no bus id (a CPU rank, an older runtime) or ran on another machine gets none:
// its GPU columns stay blank rather than show another GPU's use.
JobReport make_report(const std::vector<std::optional<profile::RankStats>>& stats, const std::vector<GpuUse>& gpus);

// The advice for a report, given the config the job ran with (for the knobs' current values). Each
// line quotes the measurements it rests on, names a knob that can change the quantity measured,
// and bounds the gain by what following it can give (docs/performance.md, "The advice").
std::vector<std::string> advise(const JobReport& r, const config::LaunchConfig& c);

// "ZeRO stage 2: optimizer state 12.3 MB per rank; per step 45.6 MB reduce-scattered, 45.6 MB
// gathered" (MB = 1e6 bytes; the ranks' range where they differ), or "" when no rank ran ZeRO.
std::string zero_line(const JobReport& r);

std::string format_report(const JobReport& r);  // the table, the ZeRO line and the advice, for the terminal
std::string report_json(const JobReport& r);  // the same numbers as JSON (report.json)

}  // namespace xlaunch::launcher
