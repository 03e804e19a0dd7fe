// Inputs the augmentation tests share (augment_test.cpp, augment_sequential_test.cpp): a
// RandomAffine with every argument set, and the key of a batch of `rows` samples.
#pragma once

#include <cstdint>
#include <memory>

#include "xlaunch/augment.h"

namespace xlaunch::augment {

inline std::shared_ptr<Transform> affine(double p = 1.0) {
  return make("RandomAffine", {{"degrees", {30}}, {"translate", {0.1, 0.2}}, {"scale", {0.8, 1.2}},
                               {"shear", {-10, 10, -5, 5}}, {"p", {p}}});
}

inline BatchKey key_of(int64_t rows) {
  BatchKey key{5, 1, {}};
  for (int64_t i = 0; i < rows; ++i) key.ids.push_back(100 + i);
  return key;
}

}  // namespace xlaunch::augment
