// ops-<R>.json in the status directory (status_dir.h): rank R's operator profile (`profile_ops: N`,
// docs/performance.md). The rank (runtime/src/profile/op_profile.h) writes it once, when its N
// profiled steps end or, having profiled fewer, when it ends; `xlaunch run` reads it after the job for the operator table it prints, for
// report.json and, with --trace, for the operator spans of the merged timeline
// (launcher/src/observe/op_table_print.h). JSON, through nlohmann/json:
//   {"rank": 0, "first_step": 11, "steps": 5, "requested_steps": 5, "device": "cpu", "record_shapes": false,
//    "self_cpu_total_ns": 5831000, "self_cuda_total_ns": 0,
//    "rows": [{"name": "aten::mm", "shapes": "", "calls": 25, "self_cpu_ns": 2422000,
//              "cpu_total_ns": 2424000, "self_cuda_ns": 0, "share": 0.415}, ...],
//    "threads": [{"tid": 200, "name": "operators"}],
//    "spans": [{"tid": 200, "name": "aten::mm", "start_ns": 1200, "dur_ns": 97000, "shapes": ""}, ...]}
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace xlaunch::status {

// One operator (with record_shapes: one operator and input shapes) over the profiled steps, summed
// as torch.profiler's key_averages() sums it. Times are wall time on the rank's clocks.
struct OpRow {
  std::string name;     // "aten::addmm", "AddmmBackward0", "autograd::engine::evaluate_function: ..."
  std::string shapes;   // the inputs' shapes as Python prints them, "[[64, 784], [784, 256], []]"; "" without record_shapes
  int64_t calls = 0;
  int64_t self_cpu_ns = 0;   // its own time: its calls' durations minus those of the operators they called
  int64_t cpu_total_ns = 0;  // its calls' durations, what they called included
  int64_t self_cuda_ns = 0;  // the GPU time of the kernels it launched itself; 0 on a CPU rank
  double share = 0;          // self CPU of the rank's total self CPU, or self CUDA of all kernel time on a GPU rank
};

// A call of an operator on the timeline: ns since the job's epoch on rank 0's clock, as the
// timeline's parts (trace_part.h), so that the launcher puts them beside the rank's own spans.
struct OpSpan {
  int tid = 0;         // one of OpTable::threads
  std::string name;
  int64_t start_ns = 0, dur_ns = 0;
  std::string shapes;  // as OpRow::shapes
};

struct OpTable {
  int rank = 0;
  int64_t first_step = 0, steps = 0;  // the optimizer steps profiled: first_step .. first_step + steps - 1 (1-based)
  // profile_ops, the steps asked for: more than `steps` when the rank ended (or its Accelerator was
  // destroyed) first. Such a partial profile holds what the rank ran after its last step too.
  int64_t requested_steps = 0;
  bool cuda = false;                  // a GPU rank: rows ranked by self CUDA time, share of kernel time
  bool record_shapes = false;         // rows per (operator, input shapes)
  int64_t self_cpu_total_ns = 0;      // every operator's self CPU time: the profiled steps' operator time
  int64_t self_cuda_total_ns = 0;     // every kernel's time (GPU rank)
  std::vector<OpRow> rows;            // the most expensive first, at most kMaxOpRows
  std::vector<std::pair<int, std::string>> threads;  // (tid, name) of the spans' tracks
  std::vector<OpSpan> spans;          // empty unless the job runs with a timeline (--trace)
};

inline constexpr size_t kMaxOpRows = 30;
// Rows printed per rank on a terminal (by xlaunch run, or by a rank without a status directory);
// report.json has every row published.
inline constexpr size_t kPrintedOpRows = 10;
// The spans' tracks on the timeline: kOpThread0 + i for the i-th thread that ran operators, beside
// the rank's own tracks (runtime/src/profile/trace.h: 1-3, loader workers from 100).
inline constexpr int kOpThread0 = 200;

// Writes dir/ops-<R>.json (R = table.rank) atomically, when dir is a private directory of this
// user's (private_files.h). Returns false and sets *why otherwise.
bool write_op_table(const std::string& dir, const OpTable& table, std::string* why);

// The table as `xlaunch run` prints it (a rank without a status directory prints it itself): a
// heading naming the rank and the steps (and how many were asked for, when fewer), then the first max_rows rows, each a line "xlaunch:   "
// name, calls, self CPU, CPU total, self CUDA, share (and the shapes with record_shapes); times in
// us, ms or s as torch.profiler's table writes them.
std::string format_op_table(const OpTable& table, size_t max_rows);

// Rank `rank`'s table in dir: nullopt when there is none, it is not this user's regular file, it
// does not parse, or it is another rank's.
std::optional<OpTable> read_op_table(const std::string& dir, int rank);

}  // namespace xlaunch::status
