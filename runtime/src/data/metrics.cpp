#include "xlaunch/metrics.h"

#include <ATen/ops/tensor.h>

#include <algorithm>
#include <string>
#include <vector>

#include "check.h"
#include "comm/ragged.h"
#include "xlaunch/error.h"

namespace xlaunch {
namespace {

// Agree before the real collective: every rank must pass the same trailing shape, dtype and
// span; the row counts may differ. Returns every rank's row count.
std::vector<int64_t> check_agreement(Communicator& comm, const at::Tensor& local, const ShardSpan& span) {
  // On local's device: an NCCL communicator gathers CUDA tensors only.
  const std::vector<RankShape> all = allgather_shapes(comm, local, span.first_position, local.device());
  std::string problem = shape_problem(all, ShapeRule{});
  for (size_t r = 1; r < all.size() && problem.empty(); ++r)
    if (all[r].tag != all[0].tag)
      problem = "rank " + std::to_string(r) + "'s rows start at shard position " + std::to_string(all[r].tag) +
                ", rank 0's at " + std::to_string(all[0].tag);
  if (!problem.empty())
    throw UsageError("gather_for_metrics: " + problem + "; every rank must pass its results for the same batch "
                     "number, one row per sample (dim 0), with the same other sizes and dtype (pad outputs of "
                     "different lengths to one first: acc.pad_across_processes(t, dim))");
  std::vector<int64_t> rows;
  for (const auto& s : all) rows.push_back(s.sizes[0]);
  return rows;
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

std::vector<int64_t> ragged_sample_rows(const std::vector<int64_t>& rows, int64_t max_rows, const ShardSpan& span) {
  const auto world = static_cast<int64_t>(rows.size());
  XLAUNCH_ASSERT(world == span.world_size, "row counts and span disagree on the world size");
  // Row by row, rank by rank: the positions in increasing order (as drop_padding), skipping the
  // rows a rank did not have.
  std::vector<int64_t> keep;
  for (int64_t i = 0; i < max_rows; ++i)
    for (int64_t r = 0; r < world; ++r)
      if (i < rows[r] && span.offset + (span.first_position + i) * world + r < span.real_positions)
        keep.push_back(r * max_rows + i);
  return keep;
}

at::Tensor gather_for_metrics(Communicator& comm, const at::Tensor& local, const ShardSpan& span) {
  if (span.world_size != comm.size())
    throw UsageError("gather_for_metrics: the span is for a world of " +
                     std::to_string(span.world_size) + " ranks but the communicator has " +
                     std::to_string(comm.size()) + "; pass the span of a loader built for this world");
  const std::vector<int64_t> rows = check_agreement(comm, local, span);
  const int64_t most = *std::max_element(rows.begin(), rows.end());
  const at::Tensor src = local.contiguous();
  if (std::all_of(rows.begin(), rows.end(), [&](int64_t n) { return n == most; }))
    return drop_padding(comm.allgather(src), span);
  const at::Tensor gathered = comm.allgather(pad_dim(src, 0, most, 0, false));
  std::vector<int64_t> flat_shape{comm.size() * most};
  flat_shape.insert(flat_shape.end(), src.sizes().begin() + 1, src.sizes().end());
  const std::vector<int64_t> keep = ragged_sample_rows(rows, most, span);
  return gathered.reshape(flat_shape).index_select(0, at::tensor(keep, at::kLong).to(src.device()));
}

}  // namespace xlaunch
