// The launch plan: the pure function that turns a validated LaunchConfig and a description of this
// machine into the exact mpirun command line and the XLAUNCH_* environment of the ranks.
//
// Nothing here touches the system; everything the decision depends on comes in through
// Environment, so every branch is tested against literal argv vectors (tests/launcher).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "xlaunch/config/launch_config.h"

namespace xlaunch::launcher {

struct Environment {
  bool is_root = false;       // mpirun refuses root without --allow-run-as-root
  int cpu_cores = 1;          // physical cores here: Open MPI's slots when no hostfile says otherwise
  std::string mpirun = "mpirun";
  std::string self_exe;       // this xlaunch binary: every rank starts as `xlaunch __rank ... -- bin`
  std::string status_dir;     // where each rank's wrapper records how the rank ended
  std::string run_id;         // XLAUNCH_RUN_ID
  std::string config_file;    // the file the config came from; empty: built-in defaults
  int restart_count = 0;      // XLAUNCH_RESTART_COUNT
  std::string resume;         // XLAUNCH_RESUME: attempt_resume()
  int hello_port = 0;         // the launcher's HelloListener (startup.h), passed to each wrapper; 0: none
  // The program Open MPI starts its daemons on other machines with (OMPI_MCA_plm_rsh_agent, else
  // ssh or rsh, whichever is installed), which a job on several machines runs under `xlaunch
  // __agent` (agent.h); empty: left as Open MPI chooses.
  std::string rsh_agent;
};

// XLAUNCH_RESUME's value for "the newest complete checkpoint in project_dir".
inline constexpr const char* kResumeLatest = "latest";

// Pure: what attempt `attempt` (0: the first) resumes from. resume_option: what `xlaunch run
// --resume` asked for ("" without it, kResumeLatest for a bare --resume, else a checkpoint
// directory). The first attempt takes it; a restart continues from the newest checkpoint of the
// failed attempts when there is a project_dir (kResumeLatest), else from what the first one did.
std::string attempt_resume(const std::string& resume_option, const std::string& project_dir, int attempt);

// Several machines: TCP keepalive on Open MPI's out-of-band channel (mpirun and its daemons), so
// that a daemon whose machine lost the launching one notices and ends itself with its ranks
// (docs/failures.md): probes start after kOobKeepaliveTimeS idle seconds, kOobKeepaliveIntvlS
// apart, and kOobKeepaliveProbes unanswered ones drop the connection. Open MPI's defaults are
// 300 s, 20 s and 9: 8 minutes.
inline constexpr int kOobKeepaliveTimeS = 5;
inline constexpr int kOobKeepaliveIntvlS = 2;
inline constexpr int kOobKeepaliveProbes = 3;

using EnvList = std::vector<std::pair<std::string, std::string>>;

struct LaunchPlan {
  std::vector<std::string> argv;  // argv[0] is the mpirun path
  EnvList env;                    // set in mpirun's environment; argv exports each with -x NAME
};

// Requires: validate(c, ...) passed. train_bin is already resolved to a path.
LaunchPlan make_launch_plan(const config::LaunchConfig& c, const Environment& e, const std::string& train_bin,
                            const std::vector<std::string>& train_args);

// Pure: the plm_rsh_agent value that puts `xlaunch __agent` (agent.h) around `agent` ("ssh -x"
// becomes "/opt/xlaunch __agent 2 ssh -x"); "" when it cannot be wrapped (no agent, a list of
// alternatives "ssh : rsh", or a path with a space, which Open MPI would split).
std::string wrapped_agent(const std::string& self_exe, const std::string& agent);

// Every variable of env::kAll with its value for this config, in kAll's order.
EnvList exported_env(const config::LaunchConfig& c, const Environment& e);

// The argv as one line a shell would read back the same: words quoted only when they need it.
std::string shell_join(const std::vector<std::string>& argv);

}  // namespace xlaunch::launcher
