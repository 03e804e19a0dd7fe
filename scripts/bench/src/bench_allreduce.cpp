// The runtime's allreduce (MpiCommunicator: a communication thread, in-place, averaged) against a
// raw MPI_Allreduce of the same bytes, float32, 1 KiB to 256 MiB (or --max_bytes). For each size
// and system prints, on rank 0:
//   bench=allreduce system=<xlaunch|mpi> bytes=N time_us=T algbw_gbps=A busbw_gbps=B
// with algorithm and bus bandwidth as nccl-tests define them: alg = bytes / time,
// bus = alg * 2(n-1)/n. Rounds alternate between the two systems; the median is printed.
#include <ATen/ops/ones.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_timing.h"
#include "comm/mpi_communicator.h"
#include "xlaunch/process_state.h"

int main(int argc, char** argv) {
  int64_t max_bytes = 256LL << 20;
  int rounds = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--max_bytes") max_bytes = std::stoll(argv[i + 1]);
    else if (k == "--rounds") rounds = std::stoi(argv[i + 1]);
  }
  auto comm = xlaunch::MpiCommunicator::world();
  const int n = comm->size();
  MPI_Comm raw;
  MPI_Comm_dup(MPI_COMM_WORLD, &raw);
  for (int64_t bytes = 1024; bytes <= max_bytes; bytes *= 4) {
    const int64_t count = bytes / 4;
    at::Tensor buf = at::ones({count});
    const int iters = static_cast<int>(std::clamp<int64_t>((64LL << 20) / bytes, 2, 200));
    std::vector<double> ours, theirs;
    for (int r = 0; r < rounds; ++r) {
      comm->barrier();
      ours.push_back(xlaunch::bench::seconds_per_call(iters, [&](int) { comm->allreduce(buf, xlaunch::ReduceOp::Avg); }));
      comm->barrier();
      // The raw call runs on this thread while the communicator's thread idles.
      theirs.push_back(xlaunch::bench::seconds_per_call(iters, [&](int) {
        MPI_Allreduce(MPI_IN_PLACE, buf.data_ptr(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, raw);
      }));
      comm->barrier();
    }
    if (comm->rank() != 0) continue;
    for (auto [name, v] : {std::pair<const char*, double>{"xlaunch", xlaunch::bench::median(ours)}, {"mpi", xlaunch::bench::median(theirs)}}) {
      const double alg = bytes / v / 1e9;
      std::printf("bench=allreduce system=%s world=%d bytes=%lld time_us=%.1f algbw_gbps=%.3f busbw_gbps=%.3f\n", name,
                  n, static_cast<long long>(bytes), v * 1e6, alg, alg * 2.0 * (n - 1) / n);
    }
    std::fflush(stdout);
  }
  MPI_Comm_free(&raw);
  return 0;
}
