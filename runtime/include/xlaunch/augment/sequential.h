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
  // concurrently.
  at::Tensor operator()(const at::Tensor& images, const BatchKey& key) const;
  const std::vector<std::shared_ptr<Transform>>& transforms() const { return transforms_; }

 private:
  std::vector<std::shared_ptr<Transform>> transforms_;
};

}  // namespace xlaunch::augment
