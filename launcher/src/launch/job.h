// Running a launch plan: mpirun as a child process (in a process group of its own unless stdin is
// a terminal in the foreground: see job.cpp), with SIGINT,
// SIGTERM and SIGHUP sent to `xlaunch run` forwarded to it, so the whole job (every rank, on every
// machine) stops; and with a deadline once the job has failed (supervise.h).
#pragma once

#include "launch/launch_plan.h"
#include "launch/spawn.h"
#include "launch/supervise.h"

namespace xlaunch::launcher {

// Starts plan.argv with plan.env added to this process's environment and waits for it, watching
// watch.status_dir: once a verdict exists or a rank has failed, mpirun gets kMpirunGraceS to end,
// then it and what it started here SIGTERM, then SIGKILL (each step said on stderr). Throws LaunchError
// when mpirun cannot be started. Afterwards, last_forwarded_signal() (spawn.h) says whether the
// user interrupted the job: such a job is not restarted.
JobRun run_plan(const LaunchPlan& plan, const JobWatch& watch);

}  // namespace xlaunch::launcher
