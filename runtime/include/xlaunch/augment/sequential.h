// Kornia's AugmentationSequential: transforms in order, each drawing its own parameters
// (augment.h has the overview).
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

#include "xlaunch/augment/transform.h"

namespace xlaunch::augment {

class Sequential {
 public:
  // Throws UsageError for a null transform (naming its position).
  explicit Sequential(std::vector<std::shared_ptr<Transform>> transforms);
  // Draws every transform's parameters for key's samples (transform i at position i, for the
  // image size it receives) and applies them in order. images: [B, C, H, W] floating point on any
  // device, B == key.ids.size() (UsageError otherwise). Thread-safe: the loader's workers call it
  // concurrently. On the CPU, a run of row_by_row() transforms is applied a few rows at a time
  // (about 1 MB of images), each row through the whole run while it is in the cache, the rows
  // spread over LibTorch's threads: the same values as the whole batch through each in turn.
  at::Tensor operator()(const at::Tensor& images, const BatchKey& key) const;
  const std::vector<std::shared_ptr<Transform>>& transforms() const { return transforms_; }

 private:
  // transforms_[first, last), all row_by_row(), applied to a CPU batch a few rows at a time; an
  // undefined tensor when one of them refused a chunk (UsageError), for the caller to apply them
  // to the whole batch, whose refusal names the batch's shape.
  at::Tensor apply_in_chunks(const at::Tensor& images, const BatchKey& key, size_t first, size_t last) const;

  std::vector<std::shared_ptr<Transform>> transforms_;
};

}  // namespace xlaunch::augment
