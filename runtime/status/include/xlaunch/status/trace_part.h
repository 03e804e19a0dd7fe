// trace-rank<R>.json in the trace directory (status_dir.h): rank R's part of the timeline
// (`xlaunch run --trace DIR`, runtime/src/profile/trace.h). Each rank writes its part when it
// ends; `xlaunch run` takes the parts (reads and removes them) and merges them into one Chrome
// trace (launcher/src/observe/timeline.h). JSON, through nlohmann/json:
//   {"rank": R, "epoch_ns": E, "threads": [{"tid": 1, "name": "training loop"}, ...],
//    "spans": [{"tid": 1, "name": "step", "start_ns": 1200, "dur_ns": 5300, "args": {"step": 7}}, ...]}
// Times are integer nanoseconds on rank 0's clock, counted from E (rank 0's CLOCK_REALTIME when the
// job started), so spans nest exactly.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace xlaunch::status {

// A span's arguments, shown by the trace viewer when the span is selected: (name, integer value)
// pairs such as ("seq", 3), ("bytes", 75 << 10). Written as one JSON object; read back in name order.
using TraceArgs = std::vector<std::pair<std::string, int64_t>>;

struct TraceSpan {
  int tid = 0;           // the thread (or CUDA stream) it ran on: a track of its own
  std::string name;
  int64_t start_ns = 0;  // since the part's epoch, on rank 0's clock
  int64_t dur_ns = 0;
  TraceArgs args;
};

struct TracePart {
  int rank = 0;
  int64_t epoch_ns = 0;                             // rank 0's CLOCK_REALTIME at the job's start
  std::vector<std::pair<int, std::string>> threads;  // (tid, name) of every track
  std::vector<TraceSpan> spans;
};

// Writes dir/trace-rank<R>.json (R = part.rank) atomically, when dir is a private directory of this
// user's (private_files.h). Bytes of a name that are not UTF-8 are written as U+FFFD.
// Returns false and sets *why otherwise.
bool write_trace_part(const std::string& dir, const TracePart& part, std::string* why);

// Reads rank `rank`'s part from dir and removes it: nullopt when there is none, or it is not this
// user's regular file, or it does not parse (then it stays, for whoever wants to look).
std::optional<TracePart> take_trace_part(const std::string& dir, int rank);

}  // namespace xlaunch::status
