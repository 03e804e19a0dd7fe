// `xlaunch __rank --status_dir DIR -- train_bin args...`: how mpirun starts every rank.
//
// The wrapper forks and execs the training binary, forwards the signals mpirun sends it (SIGINT,
// SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2) to it, records how it ended in DIR (rank_status.h)
// and then ends the same way: the same exit code, or the same signal. The training process keeps
// mpirun's environment, so MPI_Init in it joins the job as if mpirun had started it directly.
#pragma once

namespace xlaunch::launcher {

// argv[0] is the program, argv[1] "__rank". Returns the exit code to use, when it returns.
int rank_wrapper_main(int argc, char** argv);

}  // namespace xlaunch::launcher
