// ZeRO's layout (sharded data parallelism, docs/memory.md): how each gradient bucket is cut into
// one shard per rank, and which parts of which parameters fall into a rank's shard.
//
// A pure function of the bucket plan (bucket_plan.h), the parameters' sizes and the world size, so
// every rank computes the same layout, and a checkpoint can be re-sliced for another world size
// from what it records. A bucket of E parameter elements (its members in layout order, without the
// reducer's control element) is padded to W * ceil(E / W); rank r owns elements
// [r * shard, (r + 1) * shard): their optimizer state, and at stage 2 their reduced gradients.
// Padding belongs to no parameter and is never stepped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace xlaunch::zero {

// ceil(elements / world): the elements of each rank's shard of a bucket (0 for an empty bucket).
int64_t shard_elements(int64_t elements, int world);

// A run of one parameter's elements inside a shard.
struct Segment {
  size_t param = 0;          // index into the reducer's parameters
  int64_t param_offset = 0;  // first element, in the parameter's flattened order
  int64_t length = 0;
};

// One tensor the sharded optimizer steps: consecutive elements of one bucket's shard whose
// parameters belong to one parameter group of the optimizer.
struct Piece {
  size_t bucket = 0;
  int64_t offset = 0;  // first element, in the bucket's flat layout
  int64_t length = 0;
  int group = 0;
  std::vector<Segment> segments;  // in layout order; lengths sum to `length`
};

// Rank `rank`'s pieces, bucket by bucket in layout order. buckets[b] lists parameter indices in
// layout order; numel[i] is parameter i's element count; group[i] its parameter group in the
// optimizer, or -1 when the optimizer does not hold it (its elements are in no piece).
std::vector<Piece> pieces_of_rank(const std::vector<std::vector<size_t>>& buckets, const std::vector<int64_t>& numel,
                                  const std::vector<int>& group, int world, int rank);

}  // namespace xlaunch::zero
