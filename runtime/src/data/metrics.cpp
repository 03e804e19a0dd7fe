#include "xlaunch/metrics.h"

#include <ATen/ops/tensor.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "check.h"
#include "xlaunch/error.h"

namespace xlaunch {
namespace {

std::string describe(const int64_t* d) {
  std::ostringstream os;
  os << d[0] << " rows of shape [";
  for (int64_t i = 0; i < d[2]; ++i) os << (i ? "," : "") << d[4 + i];
  os << "] dtype " << c10::toString(static_cast<at::ScalarType>(d[3])) << " at shard position " << d[1];
  return os.str();
}

// Agree before the real collective: every rank must pass the same rows, shape, dtype and span.
void check_agreement(Communicator& comm, const at::Tensor& local, const ShardSpan& span) {
  constexpr int64_t kMaxDims = 8;
  if (local.dim() < 1 || local.dim() > kMaxDims)
    throw UsageError("gather_for_metrics: expected a tensor with 1 to 8 dims whose dim 0 indexes "
                     "samples, got " + std::to_string(local.dim()) + " dims");
  std::vector<int64_t> desc(4 + kMaxDims, 0);
  desc[0] = local.size(0);
  desc[1] = span.first_position;
  desc[2] = local.dim() - 1;
  desc[3] = static_cast<int64_t>(local.scalar_type());
  for (int64_t i = 1; i < local.dim(); ++i) desc[3 + i] = local.size(i);
  // On local's device: an NCCL communicator gathers CUDA tensors only.
  const at::Tensor all =
      comm.allgather(at::tensor(at::ArrayRef<int64_t>(desc)).to(local.device())).cpu().contiguous();
  const int64_t* a = all.data_ptr<int64_t>();
  const auto width = static_cast<int64_t>(desc.size());
  for (int r = 1; r < comm.size(); ++r) {
    if (!std::equal(a, a + width, a + r * width))
      throw UsageError("gather_for_metrics: rank " + std::to_string(r) + " passed " +
                       describe(a + r * width) + ", rank 0 passed " + describe(a) +
                       "; every rank must pass its results for the same batch number");
  }
}

}  // namespace

at::Tensor drop_padding(const at::Tensor& gathered, const ShardSpan& span) {
  const int64_t world = gathered.size(0);
  const int64_t rows = gathered.size(1);
  XLAUNCH_ASSERT(world == span.world_size, "gathered tensor and span disagree on the world size");
  // Row i of rank r is global position offset + (first + i) * world + r: moving the rank dim
  // inside the row dim lists the positions in increasing order, starting at offset + first * world.
  std::vector<int64_t> flat_shape{world * rows};
  flat_shape.insert(flat_shape.end(), gathered.sizes().begin() + 2, gathered.sizes().end());
  const at::Tensor ordered = gathered.transpose(0, 1).reshape(flat_shape);
  const int64_t start = span.offset + span.first_position * world;
  const int64_t keep = std::clamp<int64_t>(span.real_positions - start, 0, world * rows);
  return ordered.narrow(0, 0, keep);
}

at::Tensor gather_for_metrics(Communicator& comm, const at::Tensor& local, const ShardSpan& span) {
  if (span.world_size != comm.size())
    throw UsageError("gather_for_metrics: the span is for a world of " +
                     std::to_string(span.world_size) + " ranks but the communicator has " +
                     std::to_string(comm.size()) + "; pass the span of a loader built for this world");
  check_agreement(comm, local, span);
  return drop_padding(comm.allgather(local.contiguous()), span);
}

}  // namespace xlaunch
