// `xlaunch __agent N W1..WN ARGS...`: the wrapper of the program Open MPI starts its daemons on the
// other machines with (plm_rsh_agent: ssh, or the one set), which the launch plan puts in its place
// for a job on several machines (launch_plan.h, wrapped_agent). It runs W1..WN ARGS (the agent's own N words, then
// what mpirun passes: options, the host, the daemon's command line) with stdin and stdout as they
// are, passes its stderr on while keeping the end of it, forwards SIGINT, SIGTERM and SIGHUP, and
// when the agent has ended records agent-<host> in $XLAUNCH_STATUS_DIR (its exit code and the last
// lines it said: xlaunch/status/rank_status.h), then exits as the agent did. So when a daemon never
// calls back, the start-up deadline (startup.h) names the machine whose agent failed or spoke,
// and what it said.
#pragma once

#include <string>
#include <vector>

namespace xlaunch::launcher {

// Pure: the host in an ssh-like command line after the agent's own words (the first word that is
// not an option or an option's value: "-x -o BatchMode=yes sim1 orted ..." gives "sim1"); "" when
// there is none.
std::string agent_host(const std::vector<std::string>& args);

int agent_wrapper_main(int argc, char** argv);

}  // namespace xlaunch::launcher
