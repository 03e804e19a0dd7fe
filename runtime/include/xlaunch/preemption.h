// Preemption: the protocol between `xlaunch run` and the ranks when the job is about to be ended
// from outside (a scheduler preempting it, a spot machine reclaimed), so that it stops at a
// checkpoint instead of losing the work since the last one.
//
//   1. Something tells the job it is being preempted: `xlaunch run` receives its preempt_signal
//      (config: SIGTERM or SIGUSR1) and sends kPreemptionSignal to mpirun, which passes it to every
//      rank (each rank's wrapper, `xlaunch __rank`, passes it to the training process); or a
//      scheduler sends kPreemptionSignal to the ranks directly.
//   2. Every rank treats kPreemptionSignal as "preemption requested": the ranks agree at the next
//      optimizer step, save a checkpoint (in project_dir), and each exits with kPreemptedExitCode.
//   3. `xlaunch run` sees every rank end with kPreemptedExitCode (some may have been stopped by
//      mpirun with SIGTERM after the first had exited) and returns kPreemptedExitCode itself; when
//      it did not receive the preemption (the ranks got it directly) and max_restarts allows, it
//      restarts the job from the newest checkpoint (XLAUNCH_RESUME=latest) instead.
//
// Header-only and free of torch and MPI, so the launcher can include it without linking either.
#pragma once

#include <csignal>

namespace xlaunch {

// What the ranks receive as "checkpoint and stop".
inline constexpr int kPreemptionSignal = SIGUSR1;

// How a rank that saved its checkpoint and stopped on a preemption exits, and what `xlaunch run`
// returns for such a job: 75, EX_TEMPFAIL of <sysexits.h> ("try again later"), which schedulers
// and retry loops read as "requeue me".
inline constexpr int kPreemptedExitCode = 75;

}  // namespace xlaunch
