// Preemption: the signal that asks a rank to checkpoint and stop (docs/checkpointing.md,
// "Preemption").
//
// `xlaunch run` turns the cluster's warning (preempt_signal: SIGTERM or SIGUSR1) into SIGUSR1 to
// mpirun, which Open MPI forwards to every rank; a rank may also get SIGUSR1 straight from the
// cluster (Slurm's --signal). The handler only sets a flag. The Accelerator puts the flag on the
// next gradient allreduce (Reducer::set_control_bit), so the ranks learn together, at the same
// optimizer step, that some rank was asked, with no collective of their own; they then save a
// checkpoint at the next step boundary and leave with kPreemptedExitCode.
#pragma once

#include <cstdint>

#include "xlaunch/preemption.h"  // the signal and the exit status, shared with the launcher

namespace xlaunch::preempt {

// Installs the kPreemptionSignal (SIGUSR1) handler, once per process (ProcessState does it as the process starts, so a
// signal that comes early is kept, not fatal). Keeps the previous handler's flags otherwise.
void install_handler();

// Whether SIGUSR1 has arrived, and when the first did (CLOCK_REALTIME
// nanoseconds; 0 when none).
bool requested();
int64_t requested_at_ns();

}  // namespace xlaunch::preempt
