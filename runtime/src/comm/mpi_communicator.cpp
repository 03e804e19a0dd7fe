#include "comm/mpi_communicator.h"

#include <climits>
#include <cstring>
#include <utility>

#include "check.h"
#include "comm/mpi_half_ops.h"
#include "xlaunch/process_state.h"

namespace xlaunch {
namespace {

MPI_Datatype mpi_type(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return MPI_FLOAT;
    case at::kDouble: return MPI_DOUBLE;
    case at::kInt: return MPI_INT32_T;
    case at::kLong: return MPI_INT64_T;
    case at::kByte: return MPI_UINT8_T;
    case at::kChar: return MPI_INT8_T;
    case at::kShort: return MPI_INT16_T;
    case at::kBool: return MPI_C_BOOL;
    default:
      throw UsageError(std::string("the MPI communicator cannot move tensors of dtype ") + at::toString(t));
  }
}

// How `dtype` travels and reduces with `op`: 16-bit floats as MPI_UINT16_T with user-defined
// operations; booleans (which arrive as Max, see reduce_op_for) with MPI_LOR, the only operations
// MPI defines on MPI_C_BOOL. Avg reduces as Sum; the caller divides.
std::pair<MPI_Datatype, MPI_Op> mpi_reduction(at::ScalarType dtype, ReduceOp op) {
  if (dtype == at::kHalf || dtype == at::kBFloat16) return {MPI_UINT16_T, mpi_half_op(dtype, op)};
  if (dtype == at::kBool) return {MPI_C_BOOL, MPI_LOR};
  return {mpi_type(dtype), op == ReduceOp::Max ? MPI_MAX : MPI_SUM};
}

// MPI counts are int: large buffers go in chunks.
constexpr int64_t kMaxChunk = INT_MAX / 16;

}  // namespace

std::shared_ptr<MpiCommunicator> MpiCommunicator::world() {
  static const auto instance = std::make_shared<MpiCommunicator>();
  return instance;
}

MpiCommunicator::MpiCommunicator() {
  auto& ps = ProcessState::get();
  rank_ = ps.rank();
  size_ = ps.world_size();
  if (ps.mpi_active()) {
    XLAUNCH_CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
    XLAUNCH_CHECK_MPI(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  }
  start();
}

MpiCommunicator::MpiCommunicator(std::shared_ptr<CommThread> shared, MPI_Comm comm, int rank, int size)
    : ThreadedCommunicator(std::move(shared)), rank_(rank), size_(size), comm_(comm) {}

MpiCommunicator::~MpiCommunicator() {
  // What was issued runs first (its ops reach into this object); then the communicator is freed,
  // on the thread when it is shared (the world's thread may still be running others' collectives).
  const auto free_comm = [this] {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
  };
  stop();
  comm_thread().run_local(free_comm);  // here when the thread was this communicator's (now stopped)
}

std::shared_ptr<MpiCommunicator> MpiCommunicator::split(int color, int key) {
  if (comm_ == MPI_COMM_NULL) {  // a world of one, without MPI: the one rank is its own sub-communicator
    if (color == MPI_UNDEFINED) return nullptr;
    return std::shared_ptr<MpiCommunicator>(new MpiCommunicator(shared_thread(), MPI_COMM_NULL, 0, 1));
  }
  MPI_Comm sub = MPI_COMM_NULL;
  int sub_rank = 0, sub_size = 1;
  const auto op = [&] {
    XLAUNCH_CHECK_MPI(MPI_Comm_split(comm_, color, key, &sub));
    if (sub == MPI_COMM_NULL) return;
    XLAUNCH_CHECK_MPI(MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN));
    XLAUNCH_CHECK_MPI(MPI_Comm_rank(sub, &sub_rank));
    XLAUNCH_CHECK_MPI(MPI_Comm_size(sub, &sub_size));
  };
  if (size_ == 1) comm_thread().run_local(op);  // nobody to wait for: not a collective worth logging
  else comm_thread().enqueue(CollectiveInfo{"split"}, op)->wait();
  if (sub == MPI_COMM_NULL) return nullptr;
  return std::shared_ptr<MpiCommunicator>(new MpiCommunicator(shared_thread(), sub, sub_rank, sub_size));
}

void MpiCommunicator::run_allreduce(at::Tensor& t, ReduceOp op) {
  const auto [type, mop] = mpi_reduction(t.scalar_type(), op);
  char* base = static_cast<char*>(t.data_ptr());
  const int64_t n = t.numel();
  for (int64_t off = 0; off < n; off += kMaxChunk) {
    const int count = static_cast<int>(std::min(kMaxChunk, n - off));
    XLAUNCH_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, base + off * t.element_size(), count, type, mop, comm_));
  }
  if (op == ReduceOp::Avg) t.div_(size_);
}

void MpiCommunicator::run_broadcast(at::Tensor& t, int root) {
  char* base = static_cast<char*>(t.data_ptr());
  const int64_t bytes = t.numel() * t.element_size();
  for (int64_t off = 0; off < bytes; off += kMaxChunk) {
    const int count = static_cast<int>(std::min(kMaxChunk, bytes - off));
    XLAUNCH_CHECK_MPI(MPI_Bcast(base + off, count, MPI_BYTE, root, comm_));
  }
}

void MpiCommunicator::run_allgather(const at::Tensor& in, at::Tensor& out) {
  const int64_t bytes = in.numel() * in.element_size();
  // `in` may be this rank's chunk of `out` (allgather_async checked that nothing else overlaps):
  // MPI forbids overlapping buffers unless the input is named MPI_IN_PLACE.
  const bool in_place = in.data_ptr() == static_cast<char*>(out.data_ptr()) + rank_ * bytes;
  if (bytes > kMaxChunk) {
    // MPI counts are ints: piece by piece through a buffer of one piece per rank, each rank's piece
    // then copied to its place (a ZeRO shard of a large parameter is this big).
    const int64_t piece = int64_t{16} << 20;
    gather_scratch_.resize(static_cast<size_t>(piece * size_));
    const char* src = static_cast<const char*>(in.data_ptr());
    char* dst = static_cast<char*>(out.data_ptr());
    for (int64_t off = 0; off < bytes; off += piece) {
      const int n = static_cast<int>(std::min(piece, bytes - off));
      XLAUNCH_CHECK_MPI(MPI_Allgather(src + off, n, MPI_BYTE, gather_scratch_.data(), n, MPI_BYTE, comm_));
      for (int r = 0; r < size_; ++r)
        if (!(in_place && r == rank_)) std::memcpy(dst + r * bytes + off, gather_scratch_.data() + int64_t{r} * n, n);
    }
    return;
  }
  XLAUNCH_CHECK_MPI(MPI_Allgather(in_place ? MPI_IN_PLACE : in.data_ptr(), static_cast<int>(bytes), MPI_BYTE,
                                  out.data_ptr(), static_cast<int>(bytes), MPI_BYTE, comm_));
}

void MpiCommunicator::run_reduce_scatter(at::Tensor& in, at::Tensor& out, ReduceOp op) {
  const int64_t count = out.numel();
  if (count == 0) return;  // the same on every rank: nothing moves
  const auto [type, mop] = mpi_reduction(in.scalar_type(), op);
  if (reduce_scatter_algorithm(count, in.element_size(), forced_reduce_scatter_) == ReduceScatterAlgorithm::Ring)
    reduce_scatter_ring(in.data_ptr(), out.data_ptr(), count, type, mop, comm_, scratch_);
  else
    reduce_scatter_block(in.data_ptr(), out.data_ptr(), count, type, mop, comm_, scratch_);
  if (op == ReduceOp::Avg) out.div_(size_);
}

void MpiCommunicator::run_barrier() { XLAUNCH_CHECK_MPI(MPI_Barrier(comm_)); }

}  // namespace xlaunch
