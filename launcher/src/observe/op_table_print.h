// The operator profile after the job (`profile_ops: N`, docs/performance.md): each rank's table of
// its most expensive operators over N steps after the warm-up, as LibTorch's profiler measured them
// in the rank (runtime/src/profile/op_profile.h) and published them in the status directory
// (xlaunch/status/op_table.h). `xlaunch run` prints them after the utilization report, puts them
// in report.json ("operators") and, with --trace, the operator calls in the merged timeline.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "xlaunch/status/op_table.h"

namespace xlaunch::launcher {

// The tables ranks 0 .. world-1 published in status_dir, in rank order; a rank without one is left out.
std::vector<status::OpTable> read_op_tables(const std::string& status_dir, int world);

// What `xlaunch run` prints: each rank's first status::kPrintedOpRows rows (status::format_op_table), and
// for each rank without a table a line saying why that happens. "" when profile_ops is 0.
std::string format_op_tables(const std::vector<status::OpTable>& tables, int world, int64_t profile_ops);

// report.json's "operators": per rank {"rank", "first_step", "steps", "requested_steps" (profile_ops:
// more than steps in a partial profile, status/op_table.h), "device", "self_cpu_total_us",
// "self_cuda_total_us", "share_of", "rows": [{"name", "calls", "self_cpu_us", "cpu_total_us",
// "self_cuda_us", "share", "input_shapes" (with record_shapes)}]}.
nlohmann::ordered_json op_tables_json(const std::vector<status::OpTable>& tables);

// Rank `rank`'s operator calls as Chrome trace events (pid = rank; a track per thread that ran
// operators, tids from status::kOpThread0; microseconds; "input_shapes" in args with
// record_shapes), appended to events. Nothing when the rank published no spans.
void add_operator_events(const std::vector<status::OpTable>& tables, int rank, nlohmann::json& events);

}  // namespace xlaunch::launcher
