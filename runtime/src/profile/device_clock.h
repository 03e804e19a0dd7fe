// Device time of the step's phases on CUDA, from CUDA events read lazily: a phase records an event
// on the current stream where it begins and where it ends; at each step's end the pairs whose end
// event has completed (cudaEventQuery, never a synchronization) add their elapsed time. So the
// numbers trail the host by the work still queued, and cost no stall. Built without CUDA, or with
// the training on the CPU, every call does nothing.
#pragma once

#include <cstdint>

#include "xlaunch/status/step_stats.h"

namespace xlaunch::profile::device {

// The CUDA device the training runs on (the Accelerator's), or -1: nothing is recorded.
void set_device(int index);
void begin(Phase p, uint64_t host_start_ns);
void end(Phase p);
// Adds the device time of every completed phase to gpu_ns (per phase), and puts each on the
// timeline's "CUDA stream" track when the timeline is on.
void collect(uint64_t gpu_ns[kPhases]);

}  // namespace xlaunch::profile::device
