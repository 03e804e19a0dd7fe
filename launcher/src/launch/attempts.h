// Running a job's attempts: the status directory of each (mode 0700, docs/security.md), the launch
// plan run under the supervisor, and the restart loop: again after a failure while max_restarts
// allows (an elastic job on the machines that still answer: elastic.h), from the newest checkpoint
// when there is a project_dir. What watches an attempt besides its outcome (the utilization
// report, the flight recorder) is an AttemptObserver, so this file needs nothing of observe/.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "launch/launch_plan.h"
#include "xlaunch/config/launch_config.h"

namespace xlaunch::launcher {

// "20260101-120000-4242": this launch's XLAUNCH_RUN_ID (UTC time and the launcher's pid).
std::string make_run_id();

// Where each attempt's status directory goes: under log_dir when there is one, so ranks on other
// machines can report through a shared filesystem; else $TMPDIR or /tmp.
std::string status_base(const config::LaunchConfig& c);

// The name of attempt `attempt`'s status directory, less its random part.
std::string status_prefix(const std::string& run_id, int attempt);

// "export NAME=value" lines, then the command line, as a shell reads them back.
void print_plan(FILE* out, const LaunchPlan& plan);

// Watches each attempt besides its outcome.
class AttemptObserver {
 public:
  virtual ~AttemptObserver() = default;
  // Before mpirun starts, with the attempt's config and status directory.
  virtual void started(const config::LaunchConfig& c, const std::string& status_dir) = 0;
  // After every rank ended, before the status directory is removed.
  virtual void ended() = 0;
  // After a failed or stopped attempt's outcome was said (`job failed: ...`, `stopped by signal`),
  // before the status directory is removed: the flight recorder's turn (run id and attempt name
  // what it saves).
  virtual void failed(const std::string& run_id, int attempt) = 0;
};

struct AttemptsOptions {
  std::string mpi_version;           // said with --verbose
  bool verbose = false;              // print each attempt's plan
  std::string resume;                // `xlaunch run --resume`'s value ("" without it)
  std::vector<std::string> command;  // the training binary (resolved) and its arguments
};

// Runs the job, and again after a failure while max_restarts allows; returns the exit code (0, the
// failing rank's, 75 for a preempted job, 128 + a signal that stopped it). env holds this launch's
// run_id, mpirun and machine; each attempt sets its restart_count, resume and status_dir.
int run_attempts(const config::LaunchConfig& job, Environment env, const AttemptsOptions& o,
                 AttemptObserver& observer);

}  // namespace xlaunch::launcher
