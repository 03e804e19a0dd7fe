// `xlaunch run`, callable from other subcommands: `xlaunch test` launches its self-test through
// exactly this path.
#pragma once

#include <optional>
#include <string>

#include "cli/overrides.h"
#include "cli/subcommand.h"

namespace xlaunch::launcher {

struct RunOptions {
  Overrides overrides;
  std::string config_file;
  bool dry_run = false;
  bool verbose = false;
  double monitor_s = 0;  // --monitor SECONDS: a progress line every SECONDS; 0: none
  // --resume [DIR]: kResumeLatest (launch_plan.h) for a bare --resume, else the checkpoint directory;
  // unset: start afresh.
  std::optional<std::string> resume;
};

// Loads the config, applies the options, checks everything that can be checked before starting,
// then runs the launch plan (again after a failure or a preemption of the ranks while max_restarts
// allows, from the newest checkpoint when there is a project_dir) and reports how the ranks ended. inv.command is train_bin and its arguments. Returns the job's exit code; throws
// ConfigError or LaunchError for what is refused before a launch.
int run_job(const RunOptions& o, const Invocation& inv);

}  // namespace xlaunch::launcher
