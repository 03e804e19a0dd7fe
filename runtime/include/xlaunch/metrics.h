// Exact evaluation metrics over a sharded dataset: gather every rank's per-sample results and
// drop the duplicates that even-batch padding added (see sampler.h for the layout).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "xlaunch/extend/communicator.h"
#include "xlaunch/sampler.h"

namespace xlaunch {

// Gathers `local` from every rank and returns the results of the real samples only, in the
// epoch's global order (the order one process reading the whole dataset would see).
//
// What the caller passes:
//  - comm: the communicator of the ranks that share the sampler (same world size as span).
//  - local: dim 0 indexes samples; row i holds this rank's result for its shard position
//    span.first_position + i. Every rank passes the same trailing shape and dtype (true for the
//    same batch number of a Loader, and for a whole shard); the tensor must live where comm works
//    (CPU for MPI / in-process, CUDA for NCCL). The number of rows may differ between ranks (0
//    included): a rank whose shard ended early passes fewer, and row i is still shard position
//    span.first_position + i. Outputs that differ in another dim (generated sequences of
//    different lengths) are padded to one size first (Accelerator::pad_across_processes).
//  - span: Batch::span of the batch the rows came from, or sampler.span(0) when `local` holds
//    the rank's whole shard in order. An epoch resumed part-way (span.offset > 0) gathers the
//    positions from its offset on: the samples this job reads, each once.
//
// Collective: every rank must call it, in the same order. The first exchange (one allgather of
// 12 int64 per rank) compares the shapes, dtypes and spans and throws UsageError on every rank,
// naming each rank's shape, instead of hanging. Equal row counts then take one allgather of the
// rows; different ones pad every rank to the largest count for it and cut the padding off again.
// Returns [m, trailing...] with m = the number of real samples among the gathered rows.
at::Tensor gather_for_metrics(Communicator& comm, const at::Tensor& local, const ShardSpan& span);

// The pure part: from the allgathered [world, rows, trailing...] tensor, the rows in global order
// with the padding dropped.
at::Tensor drop_padding(const at::Tensor& gathered, const ShardSpan& span);

// The pure part when the ranks passed different row counts: rank r passed rows[r] rows, padded to
// max_rows for the allgather. Returns the indices, into the gathered rows flattened to
// [world * max_rows, ...] (rank r's row i at r * max_rows + i), of the real samples in global
// order: row i of rank r is position offset + (first_position + i) * world + r, kept when below
// span.real_positions.
std::vector<int64_t> ragged_sample_rows(const std::vector<int64_t>& rows, int64_t max_rows, const ShardSpan& span);

}  // namespace xlaunch
