// ShmCommunicator's reduce-scatter and allgather (shm_communicator.h): on one machine through the
// ranks' own shared memory, and as the machine's part of the hierarchical ones through staging.
#include <ATen/ops/div.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/scalar_tensor.h>

#include <algorithm>
#include <cstring>

#include "comm/shm_communicator.h"
#include "comm/threaded_communicator.h"
#include "xlaunch/error.h"
#include "xlaunch/kernels/cpu_reduce.h"

namespace xlaunch {
namespace {

// One range's copies, one per rank of the machine, as the reduction kernels take them.
class Copies {
 public:
  explicit Copies(int ranks) : floats_(ranks), doubles_(ranks) {}
  void set(int q, const char* p) {
    floats_[q] = reinterpret_cast<const float*>(p);
    doubles_[q] = reinterpret_cast<const double*>(p);
  }
  // out = the reduction of the n elements (float or double) at every copy.
  void reduce_into(at::ScalarType dtype, char* out, int64_t n, kernels::ReduceKind kind) const {
    const int count = static_cast<int>(floats_.size());
    if (dtype == at::kFloat) kernels::reduce_into_float(floats_.data(), count, reinterpret_cast<float*>(out), n, kind);
    else kernels::reduce_into_double(doubles_.data(), count, reinterpret_cast<double*>(out), n, kind);
  }

 private:
  std::vector<const float*> floats_;
  std::vector<const double*> doubles_;
};

kernels::ReduceKind kind_of(ReduceOp op) {
  return op == ReduceOp::Sum ? kernels::ReduceKind::Sum
         : op == ReduceOp::Avg ? kernels::ReduceKind::Avg : kernels::ReduceKind::Max;
}

char* bytes_of(const at::Tensor& t) { return static_cast<char*>(t.data_ptr()); }

}  // namespace

std::shared_ptr<Work> ShmCommunicator::reduce_scatter_async(at::Tensor in, at::Tensor out, ReduceOp op) {
  check_reduce_scatter_args(*this, in, out);
  check_cpu_collective_tensor(in, "reduce_scatter");
  op = reduce_op_for(in.scalar_type(), op, "reduce_scatter");
  Place where;
  if (size() == 1 || out.numel() == 0 || !locate(in, where))
    return fallback_->reduce_scatter_async(std::move(in), std::move(out), op);
  // The work holds the tensors, so their memory stays put until every rank has read it.
  const CollectiveInfo info = CollectiveInfo::of("reduce_scatter", in);
  return thread_.enqueue(info, [this, in = std::move(in), out = std::move(out), where, op] {
    run_reduce_scatter(in, out, where, op);
  });
}

void ShmCommunicator::run_reduce_scatter(const at::Tensor& in, const at::Tensor& out, Place where, ReduceOp op) {
  const int64_t n = out.numel(), bytes = n * in.element_size(), from = rank() * bytes;
  // Rank r alone reads chunk r of every copy, so `out` may be this rank's own chunk r. But the
  // kernel writes its destination in its first pass over sources 0 and 1: a destination that is
  // the third source or a later one (this rank's copy, from rank 2 on) is reduced beside it. The
  // sources stay in rank order, so the result has the allreduce's bits.
  const char* const mine = bytes_of(in) + from;
  const bool aliased = rank() >= 2 && bytes_of(out) < mine + bytes && mine < bytes_of(out) + bytes;
  at::Tensor dst = aliased ? at::empty_like(out) : out;
  Copies copies(size());
  in_rounds({in}, {where}, [&](size_t, size_t, int64_t) {
    for (int q = 0; q < size(); ++q) copies.set(q, peer_data(q, 0, from));
    copies.reduce_into(in.scalar_type(), bytes_of(dst), n, kind_of(op));
    machine_barrier();  // every chunk read: the copies are their owners' again
  });
  if (aliased) out.copy_(dst);
}

std::shared_ptr<Work> ShmCommunicator::allgather_async(at::Tensor in, at::Tensor out) {
  check_cpu_collective_tensor(in, "allgather");
  check_cpu_collective_tensor(out, "allgather");
  if (out.numel() != in.numel() * size() || out.scalar_type() != in.scalar_type())
    throw UsageError("allgather: the output must hold world_size * input elements of the input's dtype");
  Place where;
  const bool pull = in.numel() > 0 && locate(in, where);
  if (size() == 1 || in.numel() == 0 || !(pull || locate(out, where)))
    return fallback_->allgather_async(std::move(in), std::move(out));
  const CollectiveInfo info = CollectiveInfo::of("allgather", in);
  return thread_.enqueue(info, [this, in = std::move(in), out = std::move(out), where, pull] {
    run_allgather(in, out, where, pull);
  });
}

void ShmCommunicator::run_allgather(const at::Tensor& in, const at::Tensor& out, Place where, bool pull) {
  const int64_t bytes = in.numel() * in.element_size();
  in_rounds({pull ? in : out}, {where}, [&](size_t, size_t, int64_t) {
    for (int q = 0; q < size(); ++q) {
      // Pull: rank q's part from where it lies into chunk q here (nothing to do where `in` is that
      // chunk already). Push: this rank's part into chunk rank() of rank q's output.
      char* dst = pull ? bytes_of(out) + q * bytes : peer_data(q, 0, rank() * bytes);
      const char* src = pull ? peer_data(q, 0, 0) : bytes_of(in);
      if (dst != src) std::memmove(dst, src, static_cast<size_t>(bytes));
    }
    machine_barrier();  // every part copied: the tensors are their owners' again
  });
}

int64_t ShmCommunicator::staging_width(int64_t chunks, int64_t elem, const char* collective) const {
  const int64_t width = staging_ ? static_cast<int64_t>(staging_bytes_) / elem / chunks : 0;
  if (width == 0)
    throw CommError(std::string("hierarchical ") + collective + " on rank " + std::to_string(rank()) + ": " +
                    (staging_ ? "the staging buffer (" + std::to_string(staging_bytes_) + " bytes) cannot hold one element of each of " +
                                    std::to_string(chunks) + " ranks"
                              : std::string("no staging buffer")));
  return width;
}

void ShmCommunicator::reduce_scatter_through_staging(const at::Tensor& in, const at::Tensor& out, ReduceOp op,
                                                     int avg_over, const std::vector<int>& order, int mine,
                                                     const std::function<void(at::Tensor&, int64_t)>& across) {
  const at::ScalarType dtype = in.scalar_type();
  const int64_t elem = in.element_size(), chunk = out.numel(), blocks = static_cast<int64_t>(order.size());
  const int64_t width_max = staging_width(blocks, elem, "reduce_scatter");
  Place where;
  if (!locate(in, where)) throw CommError("hierarchical reduce_scatter: the input is not in shared memory");
  const kernels::ReduceKind kind = op == ReduceOp::Max ? kernels::ReduceKind::Max : kernels::ReduceKind::Sum;
  Copies copies(size());
  in_rounds({in}, {where}, [&](size_t, size_t, int64_t) {
    for (int64_t o = 0; o < chunk; o += width_max) {
      const int64_t width = std::min(width_max, chunk - o), staged_n = blocks * width;
      // 1. This rank's slice [begin, end) of the staged blocks, block by block: staging element
      //    b * width + i is element o + i of chunk order[b].
      const int64_t begin = staged_n * rank() / size(), end = staged_n * (rank() + 1) / size();
      for (int64_t pos = begin; pos < end;) {
        const int64_t b = pos / width, n = std::min(end, (b + 1) * width) - pos;
        const int64_t from = (order[b] * chunk + o + pos % width) * elem;
        for (int q = 0; q < size(); ++q) copies.set(q, peer_data(q, 0, from));
        copies.reduce_into(dtype, staging_ + pos * elem, n, kind);
        pos += n;
      }
      machine_barrier();  // the machine's reduction is in staging
      at::Tensor staged = at::from_blob(staging_, {staged_n}, at::TensorOptions().dtype(dtype));
      // 2. Across machines, by this machine's rank 0.
      if (rank() == 0) across(staged, width);
      machine_barrier();  // this machine's blocks hold the job's reduction
      // 3. This rank's block into its output.
      at::Tensor dst = out.view({-1}).narrow(0, o, width);
      const at::Tensor src = staged.narrow(0, mine * width, width);
      if (op == ReduceOp::Avg) at::div_out(dst, src, at::scalar_tensor(static_cast<double>(avg_over), dtype));
      else dst.copy_(src);
      machine_barrier();  // staging read by every rank; tables reusable
    }
  });
}

void ShmCommunicator::allgather_through_staging(const at::Tensor& in, const at::Tensor& out, const std::vector<int>& order,
                                                int mine, const std::function<void(at::Tensor&, int64_t)>& across) {
  const int64_t elem = in.element_size(), chunk = in.numel(), blocks = static_cast<int64_t>(order.size());
  const int64_t width_max = staging_width(blocks, elem, "allgather");
  // No tables: each rank touches only its own tensors and staging, which the last collective's final
  // barrier left free.
  for (int64_t o = 0; o < chunk; o += width_max) {
    const int64_t width = std::min(width_max, chunk - o), bytes = width * elem;
    // 1. This rank's window into its block.
    std::memcpy(staging_ + mine * bytes, bytes_of(in) + o * elem, static_cast<size_t>(bytes));
    machine_barrier();  // this machine's blocks are staged
    at::Tensor staged = at::from_blob(staging_, {blocks * width}, at::TensorOptions().dtype(in.scalar_type()));
    // 2. Across machines, by this machine's rank 0.
    if (rank() == 0) across(staged, width);
    machine_barrier();  // every block is staged
    // 3. Every block into its chunk of this rank's output.
    for (int64_t b = 0; b < blocks; ++b)
      std::memcpy(bytes_of(out) + (order[b] * chunk + o) * elem, staging_ + b * bytes, static_cast<size_t>(bytes));
    machine_barrier();  // staging read by every rank
  }
}

}  // namespace xlaunch
