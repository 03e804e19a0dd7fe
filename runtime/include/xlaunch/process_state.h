// The process's place in the job and the MPI lifetime.
//
// The place (place.h) is read once from the launcher's environment. A process started by hand is
// rank 0 of 1 and needs no MPI at all.
#pragma once

#include <string>

#include "xlaunch/place.h"

namespace xlaunch {

// The process-wide state. The first call to get() reads the place from the real environment and,
// when the world has more than one rank, initialises MPI (MPI_THREAD_SERIALIZED: every MPI call is
// made under the communicator's lock). MPI is finalised at process exit.
class ProcessState {
 public:
  static ProcessState& get();

  const Place& place() const { return place_; }
  int rank() const { return place_.rank; }
  int world_size() const { return place_.world_size; }
  bool mpi_active() const { return mpi_active_; }
  const std::string& host() const { return host_; }

  // Ends the process with `code` without running static destructors (other threads, such as a
  // loader's workers, may still be running): records how it ended for the watchdog, writes the
  // timeline, flushes, finalizes MPI (bounded by the collective timeout, as at a normal exit) and
  // _exits. For an orderly stop every rank reaches together (a preemption's checkpoint saved).
  [[noreturn]] static void end_process(int code);

  ProcessState(const ProcessState&) = delete;
  ProcessState& operator=(const ProcessState&) = delete;

 private:
  ProcessState();
  ~ProcessState();
  void finalize_mpi();
  Place place_;
  bool mpi_active_ = false;
  bool mpi_owned_ = false;
  std::string host_;
};

}  // namespace xlaunch
