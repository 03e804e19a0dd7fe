// The operator profile (`profile_ops: N`, XLAUNCH_PROFILE_OPS; docs/performance.md): LibTorch's own
// profiler (Kineto, through the C++ API of torch/csrc/autograd/profiler_kineto.h) records every
// operator this process runs for N optimizer steps after the warm-up (step_stats.h's kWarmupSteps,
// the steps the utilization report leaves out too). Then the rank sums the events per operator as
// torch.profiler's key_averages() does (aggregate, below), and publishes the top rows, and with a
// timeline (--trace) every operator call as a span, in its status directory
// (xlaunch/status/op_table.h), for `xlaunch run` to print, to put in report.json and in the merged
// timeline. A process without a status directory (started by hand), or that cannot write there,
// prints its table to stderr itself.
//
// The profiled steps run slower (the profiler records every operator; on a GPU the rank waits for
// the device once, at the end): they count in the utilization report like any step. Off (N = 0):
// no profiler call, one branch per step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "xlaunch/status/op_table.h"

namespace xlaunch::profile::ops {

struct Settings {
  int64_t steps = 0;           // N: optimizer steps profiled; 0: off
  bool record_shapes = false;  // record the inputs' shapes: rows per (operator, shapes), shapes on the spans
  bool cuda = false;           // the rank trains on a GPU: CUDA activities too, rows ranked by self CUDA time
  std::string dir;             // the status directory; empty: the table goes to stderr
  int rank = 0;
  size_t max_rows = status::kMaxOpRows;  // rows published (a test comparing every operator: all)
};

// Arms the profile (the Accelerator's constructor, from its options). The first call with steps > 0
// counts; later ones change nothing. Requires steps >= 0.
void arm(const Settings& s);

namespace detail {
inline bool armed = false;  // a profile is to come or running (set by arm, cleared when it is published)
}
inline bool armed() { return detail::armed; }

// An optimizer step ended (step_clock.h's step_done, on the training thread, when armed()): the
// profiler starts after the warm-up's last step and stops, aggregates and publishes after N more.
void step_done();

// One of Kineto's events, as torch.profiler's _parse_kineto_results reads it.
struct Event {
  std::string name;
  int64_t start_ns = 0, end_ns = 0;
  uint64_t thread = 0;                                // the thread it started on
  bool on_device = false;                             // a kernel, copy or set on the GPU (not a CPU event)
  bool async = false;                                 // ended on another thread than it started, or Kineto says so
  uint64_t correlation = 0, linked_correlation = 0;  // an operator's id / the operator a kernel or runtime call belongs to
  std::string shapes;                                 // the inputs' shapes ("[[64, 784], []]") with record_shapes; else ""
};

struct Profile {
  std::vector<status::OpRow> rows;  // every operator, most expensive first (self CUDA on a GPU, else self CPU; then name)
  int64_t self_cpu_total_ns = 0;    // the sum of every CPU event's self time
  int64_t device_total_ns = 0;      // the sum of every kernel's time
  std::vector<Event> cpu_events;    // the CPU events counted, by start time, each on the thread it is counted on
};

// key_averages() of a profile (torch/autograd/profiler_util.py), row for row:
//  1. names torch.profiler leaves out (profiler::_record_function_*, aten::is_leaf, aten::output_nr,
//     aten::_version, the memory events) are dropped;
//  2. a kernel belongs to the operator whose correlation id it links to (that operator's self
//     CUDA time); a CPU event that links to an operator (cudaLaunchKernel) is put on its thread;
//  3. per thread, an event is the child of the innermost event whose [start, end] holds it whole
//     (sorted by start, longer first); async events have no parent and no children;
//  4. an event that is the only child of an event of the same name is merged into its parent;
//  5. self CPU = duration - the children's durations; rows group by name (and shapes when
//     by_shapes) and add up calls, self and total times. Kernels are not rows of their own
//     (they are the operators' self CUDA time) but count in device_total_ns;
//  6. share = self CPU / self_cpu_total_ns, or with by_device self CUDA / device_total_ns.
Profile aggregate(std::vector<Event> events, bool by_shapes, bool by_device);

}  // namespace xlaunch::profile::ops
