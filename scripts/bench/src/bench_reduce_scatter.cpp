// The MPI communicator's two reduce-scatter algorithms (mpi_reduce_scatter.h) side by side:
// MPI_Reduce_scatter_block and the ring, through the communication thread as training uses them,
// float32 Sum, input sizes --min_bytes (4 KiB) to --max_bytes (64 MiB), each --step (4) times the last. Rounds
// alternate between the algorithms; the median is printed, on rank 0, one line per size:
//   bench=reduce_scatter transport=mpi world=W bytes=B block_gbps=X ring_gbps=Y picked=ALG
// bytes: the input on each rank (world chunks); *_gbps: bus bandwidth as nccl-tests defines it for
// reduce-scatter, bytes * (W-1)/W / time, in GB/s; picked: what the size threshold chooses.
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_timing.h"
#include "comm/mpi_communicator.h"

namespace {
using xlaunch::ReduceScatterAlgorithm;

// Seconds per reduce-scatter of `in` into `out` with `algorithm`, over `iters` calls.
double time_one(xlaunch::MpiCommunicator& comm, ReduceScatterAlgorithm algorithm, const at::Tensor& in,
                const at::Tensor& out, int iters) {
  comm.force_reduce_scatter(algorithm);
  comm.barrier();
  return xlaunch::bench::seconds_per_call(iters, [&](int) { comm.reduce_scatter(in, out, xlaunch::ReduceOp::Sum); });
}
}  // namespace

int main(int argc, char** argv) {
  int64_t min_bytes = 4LL << 10, max_bytes = 64LL << 20;
  int rounds = 7, step = 4;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--min_bytes") min_bytes = std::stoll(argv[i + 1]);
    else if (k == "--max_bytes") max_bytes = std::stoll(argv[i + 1]);
    else if (k == "--rounds") rounds = std::stoi(argv[i + 1]);
    else if (k == "--step") step = std::max(2, std::stoi(argv[i + 1]));
    else {
      std::fprintf(stderr, "bench_reduce_scatter: unknown option %s (--min_bytes, --max_bytes, --step, --rounds)\n", k.c_str());
      return 2;
    }
  }
  auto comm = xlaunch::MpiCommunicator::world();
  const int w = comm->size();
  for (int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= step) {
    const int64_t chunk = bytes / 4 / w;
    // Zeros: the ring sums into its input, and zeros stay zeros however often they are summed.
    at::Tensor in = at::zeros({chunk * w}), out = at::zeros({chunk});
    const int iters = static_cast<int>(std::clamp<int64_t>((64LL << 20) / bytes, 3, 300));
    std::vector<double> block, ring;
    for (int r = 0; r < rounds; ++r) {
      block.push_back(time_one(*comm, ReduceScatterAlgorithm::Block, in, out, iters));
      ring.push_back(time_one(*comm, ReduceScatterAlgorithm::Ring, in, out, iters));
    }
    if (comm->rank() != 0) continue;
    const double moved = static_cast<double>(chunk * w * 4) * (w - 1) / w / 1e9;
    const bool ring_picked = xlaunch::reduce_scatter_algorithm(chunk, 4, ReduceScatterAlgorithm::Auto) ==
                             ReduceScatterAlgorithm::Ring;
    std::printf("bench=reduce_scatter transport=mpi world=%d bytes=%lld block_gbps=%.3f ring_gbps=%.3f picked=%s\n", w,
                static_cast<long long>(chunk * w * 4), moved / xlaunch::bench::median(block), moved / xlaunch::bench::median(ring),
                ring_picked ? "ring" : "block");
    std::fflush(stdout);
  }
  return 0;
}
