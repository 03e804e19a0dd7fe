#include "observe/attempt_report.h"

#include <unistd.h>

#include <cstdio>
#include <optional>
#include <vector>

#include "observe/flight_report.h"
#include "observe/op_table_print.h"
#include "observe/report.h"
#include "observe/timeline.h"
#include "xlaunch/status/private_files.h"
#include "xlaunch/status/status_dir.h"

namespace xlaunch::launcher {
namespace {

void write_report_json(const std::string& dir, const JobReport& r) {
  std::string why;
  const int fd = files::open_private_dir(dir, &why);
  if (fd < 0 || !files::write_private_file(fd, "report.json", report_json(r), &why))
    std::fprintf(stderr, "xlaunch: warning: no report.json in %s: %s\n", dir.c_str(), why.c_str());
  if (fd >= 0) close(fd);
}

// The utilization report, the operator tables and the timeline of an attempt that ran.
void report_attempt(const config::LaunchConfig& c, const std::string& status_dir, const GpuSampler& gpus,
                    const JobMonitor* monitor) {
  std::vector<std::optional<profile::RankStats>> stats;
  for (int r = 0; r < c.num_processes; ++r) stats.push_back(status::read_stats_file(status_dir, r));
  // The GPUs of this machine belong to the ranks only when they train on GPUs.
  // Over the report's window (rank 0's steps after the warm-up), not the start-up.
  const std::vector<GpuUse> gpu_use = stats.empty() || !stats[0] ? gpus.mean() : gpus.mean_since(window_start_s(*stats[0]));
  JobReport report = make_report(stats, config::runs_on_cpu(c) ? std::vector<GpuUse>{} : gpu_use);
  report.launcher_host = this_host_facts();
  report.advice = advise(report, c);
  if (c.debug) report.syncs = read_syncs(status_dir, c.num_processes, report.first_step - 1);  // counted with debug
  if (c.profile_ops > 0) report.operators = read_op_tables(status_dir, c.num_processes);
  if (c.report && report.total_steps > 0) {
    std::fprintf(stderr, "%s", format_report(report).c_str());
    if (!c.log_dir.empty()) write_report_json(c.log_dir, report);
  }
  std::fprintf(stderr, "%s", format_op_tables(report.operators, c.num_processes, c.profile_ops).c_str());
  if (c.trace_dir.empty()) return;
  std::fprintf(stderr, "xlaunch: %s\n", merge_trace(c.trace_dir, report, gpus.history()).c_str());
  write_report_json(c.trace_dir, report);
  const std::string html = write_report_html(c.trace_dir, report, monitor ? monitor->rates() : std::vector<RatePoint>{});
  if (!html.empty()) std::fprintf(stderr, "xlaunch: report in %s\n", html.c_str());
}

}  // namespace

void AttemptReport::started(const config::LaunchConfig& c, const std::string& status_dir) {
  c_ = c;
  status_dir_ = status_dir;
  const bool measured = c.report || !c.trace_dir.empty();
  gpus_ = measured ? std::make_unique<GpuSampler>() : nullptr;
  monitor_ = measured ? std::make_unique<JobMonitor>(status_dir, c.num_processes, monitor_s_, gpus_.get()) : nullptr;
}

void AttemptReport::ended() {
  if (monitor_) monitor_->stop();
  if (gpus_) gpus_->stop();
  try {
    if (gpus_) {
      report_attempt(c_, status_dir_, *gpus_, monitor_.get());
    } else if (c_.profile_ops > 0) {  // the operator tables alone, without the report's sampling
      std::fprintf(stderr, "%s",
                   format_op_tables(read_op_tables(status_dir_, c_.num_processes), c_.num_processes, c_.profile_ops)
                       .c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "xlaunch: warning: no utilization report: %s\n", e.what());
  }
}

void AttemptReport::failed(const std::string& run_id, int attempt) {
  try {
    report_flight(stderr, status_dir_, c_.num_processes, c_.log_dir, run_id, attempt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "xlaunch: warning: no flight recorder: %s\n", e.what());
  }
}

}  // namespace xlaunch::launcher
