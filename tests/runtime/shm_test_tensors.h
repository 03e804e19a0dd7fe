// Tensors for the shared-memory communicator tests: over a gradient pool's blocks, and with values
// every rank can predict for every other.
#pragma once

#include <gtest/gtest.h>

#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>

#include "comm/shared_pool.h"

namespace xlaunch::test {

// A tensor of `n` elements over a pool block (the block lives as long as the tensor).
inline at::Tensor pool_tensor(SharedPool* pool, int64_t n, at::ScalarType dtype) {
  c10::DataPtr block = pool->allocate(n * c10::elementSize(dtype));
  EXPECT_TRUE(block) << "the pool has room";
  c10::Storage storage(c10::Storage::use_byte_size_t(), n * c10::elementSize(dtype), std::move(block), nullptr, false);
  return at::empty({0}, dtype).set_(storage, 0, {n}, {1});
}

// Rank r's values for tensor k: k * 1000 + index + r (integers, exact in float).
inline at::Tensor values(int64_t n, int k, int r, at::ScalarType dtype) {
  return (at::arange(n, at::kDouble) + (k * 1000 + r)).to(dtype);
}

}  // namespace xlaunch::test
