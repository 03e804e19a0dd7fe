#include "profile/job_profile.h"

#include <mpi.h>

#include <cstdint>
#include <cstdlib>
#include <limits>

#if XLAUNCH_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include <cstdio>

#include "profile/step_clock.h"
#include "profile/trace.h"
#include "xlaunch/env_vars.h"
#include "xlaunch/status/step_stats.h"

namespace xlaunch::profile {
namespace {

// Rank 0's CLOCK_REALTIME minus this rank's, from the ping-pong with the shortest round trip of 5
// (NTP's estimate: the reply is taken to come from halfway through the round trip).
int64_t clock_offset_to_rank0(int rank, int world) {
  constexpr int kRounds = 5;
  int64_t best = 0;
  uint64_t best_rtt = std::numeric_limits<uint64_t>::max();
  for (int r = 1; r < world; ++r) {
    for (int i = 0; i < kRounds; ++i) {
      if (rank == 0) {
        int64_t dummy = 0;
        MPI_Recv(&dummy, 1, MPI_INT64_T, r, 7301, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        const int64_t now = static_cast<int64_t>(realtime_ns());
        MPI_Send(&now, 1, MPI_INT64_T, r, 7302, MPI_COMM_WORLD);
      } else if (rank == r) {
        const int64_t t1 = static_cast<int64_t>(realtime_ns());
        MPI_Send(&t1, 1, MPI_INT64_T, 0, 7301, MPI_COMM_WORLD);
        int64_t t0 = 0;
        MPI_Recv(&t0, 1, MPI_INT64_T, 0, 7302, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        const int64_t t2 = static_cast<int64_t>(realtime_ns());
        if (static_cast<uint64_t>(t2 - t1) < best_rtt) {
          best_rtt = static_cast<uint64_t>(t2 - t1);
          best = t0 - (t1 + t2) / 2;
        }
      }
    }
  }
  return best;
}

}  // namespace

void start_job_profile(int rank, int world, int local_rank, bool mpi_active) {
  ClockSettings c;
  c.dir = env::get_string(env::kStatusDir);
  c.rank = rank;
  c.world = world;
  c.local_rank = local_rank;
  c.enabled = env::get_bool(env::kReport);
  start(c);

  trace::Settings t;
  t.dir = env::get_string(env::kTraceDir);
  t.rank = rank;
  t.epoch_ns = static_cast<int64_t>(realtime_ns());
  // Whether any rank traces, agreed first: the clock ping-pong below needs every rank.
  int any = t.dir.empty() ? 0 : 1;
  if (mpi_active && world > 1) MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (!any) return;
  if (mpi_active && world > 1) {
    t.clock_offset_ns = clock_offset_to_rank0(rank, world);
    MPI_Bcast(&t.epoch_ns, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  }
  if (t.dir.empty()) return;  // only some ranks trace: this one does not
  t.steps = env::get_int(env::kTraceSteps);
  if (t.steps < 1) throw env::bad_value(env::kTraceSteps, env::raw(env::kTraceSteps), "an integer >= 1");
  trace::start(t);
  std::atexit([] { trace::write(); });
}

std::string publish_cuda_device(int device) {
  std::string why = "this runtime is built without CUDA";
#if XLAUNCH_HAVE_CUDA
  char id[32] = {};  // CUDA asks for 13 ("0000:3b:00.0" and the terminator)
  const cudaError_t rc = cudaDeviceGetPCIBusId(id, sizeof id, device);
  if (rc == cudaSuccess) {
    const std::string bus_id = status::normalize_pci_bus_id(id);
    if (!bus_id.empty()) {
      set_gpu_bus_id(bus_id);
      return bus_id;
    }
    why = std::string("CUDA named it '") + id + "', not a PCI bus id";
  } else {
    (void)cudaGetLastError();  // tolerated: cleared, so that the next launch check does not report it
    why = std::string("cudaDeviceGetPCIBusId failed: ") + cudaGetErrorName(rc) + ": " + cudaGetErrorString(rc);
  }
#endif
  std::fprintf(stderr,
               "xlaunch: warning: cannot name CUDA device %d by its PCI bus id (%s); the utilization report leaves "
               "this rank's GPU columns blank\n",
               device, why.c_str());
  return "";
}

}  // namespace xlaunch::profile
