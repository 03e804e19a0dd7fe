// Collectives over tensors whose sizes differ between ranks: Accelerator::gather of different row
// counts, pad_across_processes, gather_for_metrics of uneven batches.
//
// Every ragged collective starts by agreeing: one small allgather of each rank's shape (a fixed
// descriptor of 12 int64), after which every rank knows every shape, so every rank takes the same
// decision: the same error (naming each rank's shape), or the same padded collective. Nothing is
// sent whose size the receivers do not know, so nothing can hang on a size mismatch.
//
// Ragged rows travel padded: each rank pads dim 0 to the largest row count, one allgather carries
// world * max rows, and the padding is cut off again. Equal row counts skip the padding: the same
// single allgather as before, after the shape exchange.
//
// Functions marked "Collective" must be called on every rank, in the same order; the others are
// pure.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "xlaunch/extend/communicator.h"

namespace xlaunch {

// The most dims a ragged collective takes (the descriptor's width).
inline constexpr int64_t kRaggedMaxDims = 8;

// One rank's tensor, as every rank sees it after allgather_shapes.
struct RankShape {
  bool defined = true;         // false: the rank passed an undefined tensor (refused)
  std::vector<int64_t> sizes;  // -1 past kRaggedMaxDims (such a tensor is refused)
  at::ScalarType dtype = at::kFloat;
  c10::DeviceType device = c10::DeviceType::CPU;
  int64_t tag = 0;  // the caller's own value that must agree as well (gather_for_metrics: the batch's position)
};

// "[5, 3] Float on cpu".
std::string describe(const RankShape& s);

// Every rank's shape (and `tag`), in rank order: one allgather of 12 int64 per rank through
// `comm`, the descriptor placed on `on` (NCCL gathers CUDA tensors only). Collective.
std::vector<RankShape> allgather_shapes(Communicator& comm, const at::Tensor& t, int64_t tag, const at::Device& on);

// What may differ between the ranks' tensors.
struct ShapeRule {
  int64_t free_dim = 0;       // this dim's size may differ; it must exist on every rank
  bool only_ndim = false;     // only the number of dims must agree (pad_across_processes)
  bool same_device = true;    // the device type must agree (the data goes through one communicator)
};

// "" when the shapes follow `rule` (and every tag agrees); otherwise what differs, followed by
// every rank's shape: "they differ in dim 1: rank 0 has [5, 3] Float on cpu, rank 1 has ...".
std::string shape_problem(const std::vector<RankShape>& all, const ShapeRule& rule);

// `t` padded along `dim` to `size` with `value`: at the end, or at the start with pad_first.
// `t` itself (not a copy) when it already has that size. Requires t.size(dim) <= size.
at::Tensor pad_dim(const at::Tensor& t, int64_t dim, int64_t size, const at::Scalar& value, bool pad_first);

// From `gathered` = [world, max_rows, ...] (rank r's rows first in its slot, then padding), the
// first rows[r] rows of every rank, concatenated in rank order: [sum(rows), ...].
at::Tensor concat_rows(const at::Tensor& gathered, const std::vector<int64_t>& rows);

// Gathering rows of different counts, in two steps so that the data's communicator (NCCL, made
// on first use by a collective of its own) is reached only once every rank knows the shapes agree.
//
// Every rank's row count (dim 0), after checking that every other size, the dtype and the device
// type agree: otherwise UsageError on every rank, naming each rank's shape and the fix. `shapes`
// is a CPU communicator (so a rank whose tensor is on another device is caught too); `call` names
// the caller in errors. Collective: one allgather of 12 int64 per rank.
std::vector<int64_t> agree_on_rows(Communicator& shapes, const at::Tensor& t, const std::string& call);
// Every rank's `t` concatenated along dim 0, in rank order, given every rank's row count from
// agree_on_rows, through `data` (t's device): equal counts, one allgather of the rows; different
// ones, one allgather of every rank padded to the largest count, cut back after. Collective.
at::Tensor gather_agreed_rows(Communicator& data, const at::Tensor& t, const std::vector<int64_t>& rows);

// `t` padded along `dim` (negative counts from the end) to the largest size of that dim over the
// ranks, with `pad_index` (see pad_dim). Only the number of dims must agree; a dim outside it is
// refused, on every rank. The shapes travel through `shapes` (a CPU communicator). Collective.
at::Tensor pad_across(Communicator& shapes, const at::Tensor& t, int64_t dim, const at::Scalar& pad_index,
                      bool pad_first);

}  // namespace xlaunch
