// Device time of the step's phases on CUDA, from CUDA events read lazily: a phase records an event
// on the device's current stream where it begins and where it ends; at each step's end the pairs
// whose end event has completed (a query, never a synchronization) add their elapsed time. So the
// numbers trail the host by the work still queued, and cost no stall. Built without CUDA, or with
// the training on the CPU, every call does nothing.
//
// The events are c10's (c10::cuda::CUDAEvent), each created on its stream's device whatever the
// thread's current device. The bookkeeping is phase_clock.h's: every failure is tolerated and
// leaves no CUDA error behind ("not ready" included), so a kernel-launch check elsewhere (an ATen
// op, the fused unscale) never throws an error that belongs to the clock.
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
