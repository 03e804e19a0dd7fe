// The operator profile (`profile_ops: N`, XLAUNCH_PROFILE_OPS; docs/performance.md): LibTorch's own
// profiler (Kineto, through the C++ API of torch/csrc/autograd/profiler_kineto.h) records every
// operator this process runs for N optimizer steps after the warm-up (step_stats.h's kWarmupSteps,
// the steps the utilization report leaves out too). Then the rank sums the events per operator as
// torch.profiler's key_averages() does (aggregate, below), and publishes the top rows, and with a
// timeline (--trace) every operator call as a span, in its status directory
// (xlaunch/status/op_table.h), for `xlaunch run` to print, to put in report.json and in the merged
// timeline. A process without a status directory (started by hand), or that cannot write there,
// prints its table to stderr itself. A rank that ends before its N steps publishes the steps it
// profiled (finish, below).
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

// The most steps profile_ops may ask for (the config's check says the same): LibTorch's profiler
// keeps every event of every profiled step in memory until it stops.
inline constexpr int64_t kMaxSteps = 1000;

struct Settings {
  int64_t steps = 0;           // N: optimizer steps profiled; 0: off
  bool record_shapes = false;  // record the inputs' shapes: rows per (operator, shapes), shapes on the spans
  bool cuda = false;           // the rank trains on a GPU: CUDA activities too, rows ranked by self CUDA time
  std::string dir;             // the status directory; empty: the table goes to stderr
  int rank = 0;
  size_t max_rows = status::kMaxOpRows;  // rows published (a test comparing every operator: all)
};

// Arms the profile (the Accelerator's constructor, from its options). The first call with steps > 0
// counts; later ones change nothing. Requires 0 <= steps <= kMaxSteps.
void arm(const Settings& s);

namespace detail {
inline bool armed = false;  // a profile is to come or running (set by arm, cleared when it is published)
}
inline bool armed() { return detail::armed; }

// An optimizer step ended (step_clock.h's step_done, on the training thread, when armed(), after
// the step's stats are published and before the next step's clock starts, so that stopping the
// profile is in no step's time): the profiler starts after the warm-up's last step and stops,
// aggregates and publishes after N more.
void step_done();

// The run ends (the Accelerator's destructor; and at exit, registered when the profiler starts, for
// a process that exits without destroying it): a profiler still running, the rank having ended (or
// thrown) before its N steps, is stopped and its partial profile published: the N' < N steps it
// covers, and what the rank ran after the last of them. N' = 0 (the rank never ended step
// kWarmupSteps + 1): stopped, nothing published. Only the thread that steps can stop it (LibTorch's
// profiler state is that thread's); on another thread, or when nothing runs, nothing happens. Never
// throws: a failure is a warning.
void finish() noexcept;

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
//     by_shapes) and add up calls, self and total times. A kernel an operator launched is no row
//     of its own (it is that operator's self CUDA time); one no profiled operator launched (NCCL's,
//     from xlaunch's communication thread) is a row per kernel name, as in torch.profiler's table:
//     calls = its launches, self CUDA = its time, CPU times 0. Every kernel counts in device_total_ns;
//  6. share = self CPU / self_cpu_total_ns, or with by_device self CUDA / device_total_ns.
Profile aggregate(std::vector<Event> events, bool by_shapes, bool by_device);

}  // namespace xlaunch::profile::ops
