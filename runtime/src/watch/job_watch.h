// Starting the watchdog for a job, from ProcessState once MPI is up (a world of several ranks).
#pragma once

namespace xlaunch::watch {

// Collective over MPI_COMM_WORLD (unless XLAUNCH_TIMEOUT_S is 0: then no watchdog at all, no board,
// nothing logged, and waits are unbounded; scripts/bench/faults.sh measures the watchdog's cost
// against that). Reads XLAUNCH_TIMEOUT_S, XLAUNCH_DEBUG and XLAUNCH_STATUS_DIR
// (the directory `xlaunch run` made for this attempt). Without one (ranks started by mpirun
// directly), rank 0 makes a private directory (mode 0700) and broadcasts its path; the boards are
// removed from it at a normal exit. A rank that cannot make its board there (another machine
// without that directory) keeps it in memory: its own waits are still bounded, but the others
// cannot see it. Then every rank maps the others' boards.
void start_job_watch(int rank, int world);

// Registers the exit handler that records how the process ends on its board; a non-zero status
// leaves at once (_exit) instead of finalizing MPI, which would wait for ranks still training.
// Call after the object whose destructor finalizes MPI has been constructed: handlers run in the
// reverse order of registration, so this one runs before that destructor.
void install_exit_hook();

// At a normal exit, before MPI_Finalize: removes this rank's board when it lives in the private
// directory. remove_private_dir() after MPI_Finalize (every rank has removed its own by then).
void remove_own_board();
void remove_private_dir();

}  // namespace xlaunch::watch
