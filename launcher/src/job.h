// Running a launch plan: mpirun as a child process, with SIGINT, SIGTERM and SIGHUP sent to
// `xlaunch run` forwarded to it, so the whole job (every rank, on every machine) stops.
#pragma once

#include "launch_plan.h"

namespace xlaunch::launcher {

// Starts plan.argv with plan.env added to this process's environment and waits for it.
// Returns waitpid's status. Throws LaunchError when mpirun cannot be started.
int run_plan(const LaunchPlan& plan);

// The last signal forwarded to the job (0: none): a job the user interrupted is not restarted.
int last_forwarded_signal();

}  // namespace xlaunch::launcher
