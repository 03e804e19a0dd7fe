// The process's place in the job (rank, world size, local rank) and the MPI lifetime.
//
// The place is read once from the launcher's environment: Open MPI (OMPI_COMM_WORLD_*), then
// PMI (PMI_RANK/PMI_SIZE), Slurm (SLURM_PROCID/SLURM_NTASKS), torchrun (RANK/WORLD_SIZE/LOCAL_RANK).
// A process started by hand is rank 0 of 1 and needs no MPI at all.
#pragma once

#include <functional>
#include <string>

namespace xlaunch {

struct Place {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string source = "none (started by hand: rank 0 of 1)";
};

using GetEnv = std::function<const char*(const char*)>;

// Pure: the place described by an environment. Throws UsageError when the variables contradict
// each other (rank >= world size, a non-number, ...), naming the variables.
Place place_from_env(const GetEnv& getenv);

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

  ProcessState(const ProcessState&) = delete;
  ProcessState& operator=(const ProcessState&) = delete;

 private:
  ProcessState();
  ~ProcessState();
  Place place_;
  bool mpi_active_ = false;
  bool mpi_owned_ = false;
  std::string host_;
};

}  // namespace xlaunch
