// What `xlaunch run --trace DIR` leaves in DIR when the job ends (docs/performance.md):
//  - trace.json: one Chrome trace over all ranks (pid = rank, tid = thread), merged from the ranks'
//    parts (xlaunch/status/trace_part.h, already on rank 0's clock), with NVML samples as
//    counter events; opens in Perfetto UI and chrome://tracing;
//  - report.html: one self-contained page (inline SVG): the phase split per rank, steps/s over
//    time, what rank 0's tracker logged over steps (DIR/scalars.jsonl, logged_scalars.h), and the
//    advice.
#pragma once

#include <string>
#include <vector>

#include "observe/monitor.h"
#include "observe/gpu_sampler.h"
#include "observe/report.h"

namespace xlaunch::launcher {

// Merges the ranks' parts into DIR/trace.json and removes them. Returns a sentence for the user:
// what was written, or why not.
std::string merge_trace(const std::string& dir, const JobReport& report,
                        const std::vector<std::pair<double, std::vector<GpuSample>>>& gpu_history);

// Writes DIR/report.html. Returns its path, or "" (and a warning on stderr) when it cannot.
std::string write_report_html(const std::string& dir, const JobReport& report, const std::vector<RatePoint>& rates);

}  // namespace xlaunch::launcher
