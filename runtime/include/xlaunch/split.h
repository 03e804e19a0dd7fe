// Which items of a list each rank takes, for inference over a list (prompts, file names):
// Accelerator::split_between_processes. A pure function of (n, rank, world, apply_padding).
//
// Contiguous chunks in rank order, as Accelerate's split_between_processes: with n = q * world + e
// (0 <= e < world), ranks 0 .. e-1 take q + 1 items and the others q; rank r starts at
// r * q + min(r, e). So 5 items on 3 ranks: {0, 1}, {2, 3}, {4}.
//
// apply_padding: every rank takes ceil(n / world) items, a short chunk repeating its last item
// (5 on 3: {0, 1}, {2, 3}, {4, 4}), so that per-rank results can be gathered with tensors of one
// size; drop the duplicates after gathering (the last ceil(n / world) * world - n results).
// A rank whose chunk is empty (fewer items than ranks) repeats the list's last item; no items at
// all give every rank nothing.
//
// Unlike Accelerate, without apply_padding a rank beyond the items gets nothing (Accelerate hands
// it the last item again, which counts that item twice in anything gathered afterwards).
#pragma once

#include <cstdint>
#include <vector>

namespace xlaunch {

// The indices into a list of n items that `rank` of `world` takes, in order. Throws UsageError for
// a rank outside [0, world) or a negative n.
std::vector<int64_t> split_indices(int64_t n, int rank, int world, bool apply_padding);

}  // namespace xlaunch
