// The timeline (`xlaunch run --trace DIR`, XLAUNCH_TRACE_DIR): spans of the training loop's steps
// and phases, of every collective on the communication thread, and of every batch a loader worker
// makes, for `trace_steps` steps after the warm-up. Each rank writes its part to DIR when it ends
// (xlaunch/status/trace_part.h), on rank 0's clock; `xlaunch run` merges them into DIR/trace.json
// (Chrome trace format: Perfetto UI, chrome://tracing). Outside the window, recording costs one
// relaxed atomic load per span.
#pragma once

#include <cstdint>
#include <string>

#include "xlaunch/status/trace_part.h"

namespace xlaunch::profile::trace {

inline constexpr int kTrainThread = 1, kCommThread = 2, kCudaStream = 3, kLoaderThread0 = 100;
inline constexpr int64_t kWarmupSteps = 5;  // the window starts after this many optimizer steps

struct Settings {
  std::string dir;  // empty: no timeline
  int rank = 0;
  int64_t steps = 50;
  int64_t clock_offset_ns = 0;  // add to this rank's CLOCK_REALTIME to get rank 0's
  int64_t epoch_ns = 0;         // rank 0's CLOCK_REALTIME at the start: timestamps count from it
};

void start(const Settings& s);
bool active();
void set_step(int64_t steps_done);  // opens and closes the window
// A complete span: start on CLOCK_MONOTONIC, with its arguments for the viewer (none by default).
void span(int tid, const char* name, uint64_t start_mono_ns, uint64_t dur_ns, status::TraceArgs args = {});
// This thread's trace id for a loader worker (kLoaderThread0 + a number), named on first use.
int loader_thread_id();
// Whether this rank writes a timeline part (start ran with a directory), and a CLOCK_REALTIME time of
// this rank on the part's clock (ns since the job's epoch, on rank 0's clock): for spans recorded
// by others, LibTorch's profiler's operators (op_profile.h).
bool enabled();
int64_t part_ns(int64_t realtime_ns);
// Writes this rank's part to DIR (from the process's exit path). Once.
void write();

}  // namespace xlaunch::profile::trace
