// Gradient bucket assignment: which parameters share a bucket (one flat buffer, one allreduce).
//
// A pure function, tested with literal index lists. Parameters are taken in reverse registration
// order, because backward produces gradients roughly in that order: the first bucket then fills
// first and its allreduce starts while backward is still computing the earlier layers. The first
// bucket is small (first_cap_bytes) so that communication starts as early as possible. A bucket
// holds parameters of one dtype and device only; a parameter larger than the cap gets a bucket of
// its own. As in PyTorch's DDP, a bucket closes once its size reaches the cap.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace xlaunch {

struct BucketParam {
  int64_t bytes = 0;
  std::string group;  // dtype and device, e.g. "float@cpu": only equal groups share a bucket
};

// The caps, from ReducerOptions (first_bucket_bytes, bucket_cap_mb): no defaults of their own.
struct BucketCaps {
  int64_t first_cap_bytes = 0;
  int64_t cap_bytes = 0;
  // A parameter of at least cap_bytes gets a bucket of its own, closing the open bucket of its group
  // first (ZeRO stage 2: such a gradient is reduce-scattered from where autograd put it, and the
  // smaller ones share a staging buffer; reducer.h).
  bool alone_from_cap = false;
};

// Returns buckets in the order they will be reduced; each lists parameter indices (into `params`,
// which is in registration order) in the order they are laid out in the bucket's buffer.
std::vector<std::vector<size_t>> assign_buckets(const std::vector<BucketParam>& params, const BucketCaps& caps);

}  // namespace xlaunch
