// Running a launch plan: mpirun as a child process (in a process group of its own unless stdin is
// a terminal in the foreground: see job.cpp), with SIGINT, SIGTERM and SIGHUP sent to `xlaunch
// run` forwarded to it, so the whole job (every rank, on every machine) stops; the preempt signal
// turned into "checkpoint and stop" (xlaunch/preemption.h); and with a deadline on every ending.
#pragma once

#include <csignal>

#include "launch/launch_plan.h"
#include "launch/spawn.h"
#include "launch/supervise.h"

namespace xlaunch::launcher {

// How `xlaunch run` treats a preemption (config: preempt_signal, preempt_timeout_s).
struct Preemption {
  int signal = SIGTERM;  // its first arrival is passed to mpirun as kPreemptionSignal
  int timeout_s = 120;   // then the ranks have this long to stop before the job is ended
};

// Seconds the processes of the job left on this machine after mpirun has ended (reparented to
// `xlaunch run`, their subreaper) have to end by themselves, before SIGTERM; SIGKILL follows
// kMpirunTermS later.
inline constexpr int kLeftoverGraceS = 2;

// Starts plan.argv with plan.env added to this process's environment and waits for it, watching
// watch.status_dir. Once the job is ending (a verdict exists, a rank has failed, a stop signal was
// forwarded, or preempt.timeout_s passed after a preemption, which sends mpirun SIGTERM), mpirun
// gets kMpirunGraceS to end, then it and what it started here SIGTERM, then SIGKILL (each step
// said on stderr). Returns only when every process it started on this machine is gone: `xlaunch
// run` is their subreaper (PR_SET_CHILD_SUBREAPER), and those that outlive mpirun get
// kLeftoverGraceS, then SIGTERM, then SIGKILL, and are reaped. Throws LaunchError when mpirun
// cannot be started. JobRun says which signals arrived: an interrupted job is not restarted.
JobRun run_plan(const LaunchPlan& plan, const JobWatch& watch, const Preemption& preempt = {});

}  // namespace xlaunch::launcher
