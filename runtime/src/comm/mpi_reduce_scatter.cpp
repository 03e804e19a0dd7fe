#include "comm/mpi_reduce_scatter.h"

#include <algorithm>
#include <cstring>

#include "check.h"

namespace xlaunch {
namespace {

int64_t type_size(MPI_Datatype type) {
  int size = 0;
  XLAUNCH_CHECK_MPI(MPI_Type_size(type, &size));
  return size;
}

struct Comm {
  int rank = 0, size = 1;
};

Comm place(MPI_Comm comm) {
  Comm c;
  XLAUNCH_CHECK_MPI(MPI_Comm_rank(comm, &c.rank));
  XLAUNCH_CHECK_MPI(MPI_Comm_size(comm, &c.size));
  return c;
}

}  // namespace

ReduceScatterAlgorithm reduce_scatter_algorithm(int64_t chunk_numel, int64_t element_size,
                                                ReduceScatterAlgorithm forced) {
  if (chunk_numel > kMpiMaxCount) return ReduceScatterAlgorithm::Ring;
  if (forced != ReduceScatterAlgorithm::Auto) return forced;
  return chunk_numel * element_size >= kRingReduceScatterChunkBytes ? ReduceScatterAlgorithm::Ring
                                                                     : ReduceScatterAlgorithm::Block;
}

void reduce_scatter_block(void* in, void* out, int64_t count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                          std::vector<char>& scratch) {
  XLAUNCH_ASSERT(count <= kMpiMaxCount, "reduce_scatter_block: count fits an int");
  const Comm c = place(comm);
  const int64_t bytes = count * type_size(type);
  // MPI forbids a receive buffer inside the send buffer: the result goes through scratch then.
  const bool aliased = out == static_cast<char*>(in) + c.rank * bytes;
  if (aliased) scratch.resize(static_cast<size_t>(std::max<int64_t>(bytes, scratch.size())));
  void* result = aliased ? scratch.data() : out;
  XLAUNCH_CHECK_MPI(MPI_Reduce_scatter_block(in, result, static_cast<int>(count), type, op, comm));
  if (aliased) std::memcpy(out, result, static_cast<size_t>(bytes));
}

void reduce_scatter_ring(const void* in, void* out, int64_t count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                         std::vector<char>& scratch) {
  const Comm c = place(comm);
  const int w = c.size, me = c.rank, right = (me + 1) % w, left = (me + w - 1) % w;
  const int64_t elem = type_size(type), bytes = count * elem;
  const char* data = static_cast<const char*>(in);
  const auto chunk = [&](int k) { return data + static_cast<int64_t>(((k % w) + w) % w) * bytes; };
  // Each step's partial result lands where the next step sends it from, never in `in` (left as it
  // was; MPI_Sendrecv's buffers must not overlap). The last step's lands in `out`; stepping back
  // from there the partial results alternate between one chunk of scratch and `out` itself, so one
  // chunk of scratch does. When `out` is chunk me of `in` (read in the last step), two chunks of
  // scratch hold the partial results instead, and the last one is reduced into `out`.
  const bool aliased = out == chunk(me);
  scratch.resize(static_cast<size_t>(std::max<int64_t>((aliased ? 2 : 1) * bytes, scratch.size())));
  const auto partial = [&](int s) -> char* {
    if (aliased) return scratch.data() + (s % 2) * bytes;
    return (w - 2 - s) % 2 == 0 ? static_cast<char*>(out) : scratch.data();
  };
  for (int s = 0; s + 1 < w; ++s) {
    const bool last = s + 2 == w;
    const char* send = s == 0 ? chunk(me - 1) : partial(s - 1);
    const char* mine = chunk(me - s - 2);
    char* recv = partial(s);
    for (int64_t off = 0; off < count; off += kMpiMaxCount) {
      const int n = static_cast<int>(std::min(kMpiMaxCount, count - off));
      XLAUNCH_CHECK_MPI(MPI_Sendrecv(send + off * elem, n, type, right, s, recv + off * elem, n, type, left, s, comm,
                                     MPI_STATUS_IGNORE));
      // MPI_Reduce_local(a, b) is b = a (op) b.
      if (last && aliased) XLAUNCH_CHECK_MPI(MPI_Reduce_local(recv + off * elem, static_cast<char*>(out) + off * elem,
                                                              n, type, op));
      else XLAUNCH_CHECK_MPI(MPI_Reduce_local(mine + off * elem, recv + off * elem, n, type, op));
    }
  }
}

}  // namespace xlaunch
