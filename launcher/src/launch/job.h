// Running a launch plan: mpirun as a child process, with SIGINT, SIGTERM and SIGHUP sent to
// `xlaunch run` forwarded to it, so the whole job (every rank, on every machine) stops.
#pragma once

#include "launch/launch_plan.h"
#include "launch/spawn.h"

namespace xlaunch::launcher {

// Starts plan.argv with plan.env added to this process's environment and waits for it.
// Returns waitpid's status. Throws LaunchError when mpirun cannot be started. Afterwards,
// last_forwarded_signal() (spawn.h) says whether the user interrupted the job: such a job is not
// restarted.
int run_plan(const LaunchPlan& plan);

}  // namespace xlaunch::launcher
