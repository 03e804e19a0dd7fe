// Exact evaluation metrics over a sharded dataset: gather every rank's per-sample results and
// drop the duplicates that even-batch padding added (see sampler.h for the layout).
#pragma once

#include <ATen/core/Tensor.h>

#include "xlaunch/extend/communicator.h"
#include "xlaunch/sampler.h"

namespace xlaunch {

// Gathers `local` from every rank and returns the results of the real samples only, in the
// epoch's global order (the order one process reading the whole dataset would see).
//
// What the caller passes:
//  - comm: the communicator of the ranks that share the sampler (same world size as span).
//  - local: dim 0 indexes samples; row i holds this rank's result for its shard position
//    span.first_position + i. Every rank passes the same number of rows and the same trailing
//    shape and dtype (true for the same batch number of a Loader, and for a whole shard); the
//    tensor must live where comm works (CPU for MPI / in-process, CUDA for NCCL).
//  - span: Batch::span of the batch the rows came from, or sampler.span(0) when `local` holds
//    the rank's whole shard in order. An epoch resumed part-way (span.offset > 0) gathers the
//    positions from its offset on: the samples this job reads, each once.
//
// Collective: every rank must call it, in the same order. The first exchange compares the row
// counts and shapes and throws UsageError naming the rank that differs instead of hanging.
// Returns [m, trailing...] with m = the number of real samples among the gathered rows.
at::Tensor gather_for_metrics(Communicator& comm, const at::Tensor& local, const ShardSpan& span);

// The pure part: from the allgathered [world, rows, trailing...] tensor, the rows in global order
// with the padding dropped.
at::Tensor drop_padding(const at::Tensor& gathered, const ShardSpan& span);

}  // namespace xlaunch
