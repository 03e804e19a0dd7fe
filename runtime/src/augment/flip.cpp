// RandomHorizontalFlip (geometric.h): Kornia's hflip on the rows drawn.
#include <ATen/ops/flip.h>

#include "augment/warp.h"
#include "xlaunch/augment/geometric.h"

namespace xlaunch::augment {

RandomHorizontalFlip::RandomHorizontalFlip(const Args& args) {
  options_ = ArgReader("RandomHorizontalFlip", args, {}).options(0.5);
}

at::Tensor RandomHorizontalFlip::apply(const at::Tensor& images, const Params& params) const {
  check_apply(*this, images, params);
  return detail::apply_rows(images, params.applied,
                            [](const at::Tensor& rows, const std::vector<int64_t>&) { return rows.flip(-1); });
}

namespace {
[[maybe_unused]] const bool kRegistered = (register_transform("RandomHorizontalFlip",
                                                              [](const Args& a) {
                                                                return std::make_shared<RandomHorizontalFlip>(a);
                                                              }),
                                           true);
}

}  // namespace xlaunch::augment
