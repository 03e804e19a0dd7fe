// `xlaunch __rank --status_dir DIR -- train_bin args...`: how mpirun starts every rank.
//
// The wrapper runs the training binary as its child (spawn.h), forwards the signals mpirun sends
// it (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2) to it, records how it ended in DIR
// (xlaunch/status/rank_status.h) and then ends the same way: the same exit code, or the same signal. The training
// process keeps mpirun's environment, so MPI_Init in it joins the job as if mpirun had started it
// directly. Its lifeline: when its parent (Open MPI's daemon on this machine) is gone, it ends the
// training process (SIGTERM, then SIGKILL 2 s later), so no rank outlives the daemon that ran it.
#pragma once

#include "xlaunch/place.h"

namespace xlaunch::launcher {

// argv[0] is the program, argv[1] "__rank". Returns the exit code to use, when it returns.
int rank_wrapper_main(int argc, char** argv);

// The rank the status file is named after: the runtime's own reading of the environment
// (xlaunch/place.h), so both name the same rank. 0 when the variables contradict each other; the
// training process, if it uses the runtime, stops and says why.
int rank_from_env(const GetEnv& getenv);

}  // namespace xlaunch::launcher
