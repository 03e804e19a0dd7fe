// A group of tensors as views into one flat buffer, as a bucket holds them: where each starts and
// how many elements it has (amp_unscale_test.cpp's host walk, amp_unscale_cuda_test.cpp's cases).
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

namespace xlaunch::test {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct TensorGroup {
  std::vector<int64_t> offset, numel;
  int64_t total = 0;  // elements in the buffer, gaps included
};

}  // namespace xlaunch::test
