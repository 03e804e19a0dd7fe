// Reduce-scatter over MPI, for MpiCommunicator::reduce_scatter_async: two algorithms and the pure
// choice between them. Both reduce `world` chunks of `count` elements each; rank r ends with chunk
// r reduced over every rank's input.
//  - Block: MPI_Reduce_scatter_block (Open MPI picks its own algorithm).
//  - Ring: world-1 steps; in each, every rank sends one chunk of partial results to the right and
//    receives one from the left (MPI_Sendrecv), and adds its own input's chunk to the received one
//    (MPI_Reduce_local: the same operations, user-defined 16-bit ones included, that MPI's
//    collectives use). After the last step rank r holds chunk r reduced over every rank. Each rank
//    sends (world-1)/world of the buffer once, the least any reduce-scatter can, and each message
//    is one whole chunk.
// Neither changes `in` (unless `out` is part of it).
// The functions make MPI calls: call them on the communication thread only.
#pragma once

#include <mpi.h>

#include <climits>
#include <cstdint>
#include <vector>

namespace xlaunch {

enum class ReduceScatterAlgorithm { Auto, Block, Ring };

// MPI counts are int: the most elements one call moves here (a larger chunk goes by the ring, in
// pieces of this many).
constexpr int64_t kMpiMaxCount = INT_MAX / 16;

// From this many bytes per chunk on, the ring is at least as fast as MPI_Reduce_scatter_block on
// every world measured (scripts/bench/reduce_scatter.sh: Open MPI 4.1 over shared memory, 2, 3
// and 4 ranks of a 2-core machine, float32). Ring / block bus bandwidth by chunk size:
//   chunk      2 ranks   3 ranks   4 ranks
//   32 KiB     1.16      1.14      1.00
//   64 KiB     1.24      1.32      0.97-1.05
//   256 KiB    2.4-2.7   1.3-1.4   1.20
//   16 MiB     2.8-3.1   1.6-1.8   2.6
// Below it they are within noise of each other, except on 4 ranks, where the ring's three
// dependent steps cost more than its bandwidth saves (0.84-0.89 at 4-16 KiB chunks). Large buffers
// are where it matters: at 64 MiB inputs Open MPI's block algorithm falls to 0.3-0.6 GB/s, the ring
// keeps 1.2-3.6.
constexpr int64_t kRingReduceScatterChunkBytes = int64_t{1} << 16;

// The algorithm for chunks of `chunk_numel` elements of `element_size` bytes.
// `forced` (Block or Ring; tests and the benchmark) wins, except that chunks above kMpiMaxCount
// elements always take the ring: MPI_Reduce_scatter_block's count is one int.
ReduceScatterAlgorithm reduce_scatter_algorithm(int64_t chunk_numel, int64_t element_size,
                                                ReduceScatterAlgorithm forced);

// MPI_Reduce_scatter_block of `in` (world * count elements) into `out` (count elements), which may
// be this rank's chunk of `in`. Requires count <= kMpiMaxCount.
void reduce_scatter_block(void* in, void* out, int64_t count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                          std::vector<char>& scratch);

// The ring over `in` (world * count elements) into `out` (count elements, which may be this rank's
// chunk of `in`). `scratch` is grown to one chunk (two when `out` is chunk me of `in`) and kept by the caller.
void reduce_scatter_ring(const void* in, void* out, int64_t count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                         std::vector<char>& scratch);

}  // namespace xlaunch
