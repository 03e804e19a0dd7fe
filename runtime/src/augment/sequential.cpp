// Kornia's AugmentationSequential (sequential.h).
#include "xlaunch/augment/sequential.h"

#include "xlaunch/error.h"

namespace xlaunch::augment {

Sequential::Sequential(std::vector<std::shared_ptr<Transform>> transforms) : transforms_(std::move(transforms)) {
  for (size_t i = 0; i < transforms_.size(); ++i) {
    if (!transforms_[i]) {
      throw UsageError("augment::Sequential: transform " + std::to_string(i) +
                       " is null; make it with augment::make(name, args)");
    }
  }
}

at::Tensor Sequential::operator()(const at::Tensor& images, const BatchKey& key) const {
  if (!images.defined() || images.dim() != 4 || images.size(0) != static_cast<int64_t>(key.ids.size())) {
    throw UsageError("augment::Sequential: the images must be [B, C, H, W] with B = " +
                     std::to_string(key.ids.size()) + " (one row per id of the BatchKey), got " +
                     (images.defined() ? std::to_string(images.dim()) + " dimensions" +
                                             (images.dim() > 0 ? " and " + std::to_string(images.size(0)) + " rows" : "")
                                       : std::string("an undefined tensor")));
  }
  at::Tensor out = images;
  for (size_t i = 0; i < transforms_.size(); ++i) {
    const Transform& t = *transforms_[i];
    const Params params = t.draw(key, static_cast<int>(i), out.size(2), out.size(3));
    out = t.apply(out, params);
  }
  return out;
}

}  // namespace xlaunch::augment
