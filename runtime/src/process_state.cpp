#include "xlaunch/process_state.h"

#include <mpi.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>

#include "profile/job_profile.h"
#include "check.h"
#include "watch/job_watch.h"
#include "watch/preemption.h"
#include "profile/trace.h"
#include "watch/watchdog.h"
#include "xlaunch/env_vars.h"

namespace xlaunch {

ProcessState& ProcessState::get() {
  static ProcessState state;
  // After `state` exists, so that the exit handler runs before its destructor finalizes MPI.
  static const bool exit_hook = state.mpi_owned_ && state.world_size() > 1 ? (watch::install_exit_hook(), true) : false;
  (void)exit_hook;
  return state;
}

ProcessState::ProcessState() {
  preempt::install_handler();  // before anything slow: a preemption that comes early is kept
  place_ = place_from_env([](const char* n) { return std::getenv(n); });
  char name[HOST_NAME_MAX + 1] = {0};
  host_ = gethostname(name, sizeof name) == 0 ? name : "unknown-host";
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) {
    mpi_active_ = true;  // someone else (the user's main) owns MPI's lifetime
  } else if (place_.world_size > 1) {
    int provided = 0;
    XLAUNCH_CHECK_MPI(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided));
    if (provided < MPI_THREAD_SERIALIZED)
      throw CommError("MPI provides thread level " + std::to_string(provided) +
                      " below MPI_THREAD_SERIALIZED; xlaunch calls MPI from its communication thread");
    mpi_active_ = mpi_owned_ = true;
  }
  if (mpi_active_) {
    int r = 0, n = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (r != place_.rank || n != place_.world_size)
      throw UsageError("MPI says rank " + std::to_string(r) + " of " + std::to_string(n) + " but " +
                       place_.source + " variables say rank " + std::to_string(place_.rank) + " of " +
                       std::to_string(place_.world_size) + "; start the job through `xlaunch run` or mpirun");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (place_.world_size > 1) watch::start_job_watch(place_.rank, place_.world_size);
  }
  profile::start_job_profile(place_.rank, place_.world_size, place_.local_rank, mpi_active_);
}

ProcessState::~ProcessState() { finalize_mpi(); }

void ProcessState::end_process(int code) {
  ProcessState& state = get();
  if (state.mpi_owned_ && state.world_size() > 1) watch::record_exit(code);
  profile::trace::write();
  std::fflush(nullptr);
  state.finalize_mpi();
  std::fflush(nullptr);
  _exit(code);
}

void ProcessState::finalize_mpi() {
  if (!mpi_owned_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  // MPI_Finalize waits for the other ranks. If one of them is stuck in a collective that this rank
  // will never join (it failed and is leaving), waiting forever would hang the job: bound it by
  // the collective timeout, after which SIGALRM ends this process and mpirun ends the job.
  const long timeout = static_cast<long>(watch::settings().timeout_s);
  watch::remove_own_board();
  if (timeout > 0) alarm(static_cast<unsigned>(timeout));
  MPI_Finalize();
  alarm(0);
  watch::remove_private_dir();
}

}  // namespace xlaunch
