// Tensors for the shared-memory communicator tests: over a gradient pool's blocks, and with values
// every rank can predict for every other (and their reduction, computed by one process).
#pragma once

#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/stack.h>

#include <string>
#include <vector>

#include "comm/shared_pool.h"
#include "xlaunch/extend/communicator.h"

namespace xlaunch::test {

// A tensor of `n` elements over a pool block (the block lives as long as the tensor).
inline at::Tensor pool_tensor(SharedPool* pool, int64_t n, at::ScalarType dtype) {
  c10::DataPtr block = pool->allocate(n * c10::elementSize(dtype));
  EXPECT_TRUE(block) << "the pool has room";
  c10::Storage storage(c10::Storage::use_byte_size_t(), n * c10::elementSize(dtype), std::move(block), nullptr, false);
  return at::empty({0}, dtype).set_(storage, 0, {n}, {1});
}

// Rank q's n random values for case `salt` (a generator seeded with both, so every rank knows every
// rank's): integers in [-20, 20], whose sums over a few ranks are exact in every dtype.
inline at::Tensor random_values(int64_t n, int salt, int q, at::ScalarType dtype) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(salt) * 1000 + static_cast<uint64_t>(q));
  return at::randint(-20, 21, {n}, gen, at::kDouble).to(dtype);
}

// One process's reduction of random_values over `world` ranks, in double.
inline at::Tensor reduced_values(int64_t n, int salt, int world, ReduceOp op) {
  std::vector<at::Tensor> all;
  for (int q = 0; q < world; ++q) all.push_back(random_values(n, salt, q, at::kDouble));
  const at::Tensor s = at::stack(all);
  if (op == ReduceOp::Max) return std::get<0>(s.max(0));
  return op == ReduceOp::Sum ? s.sum(0) : s.mean(0);
}

// got (any dtype) equals want (double) within one rounding of got's dtype (Avg divides); nothing
// for integer sums.
inline void expect_near(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  EXPECT_TRUE(at::allclose(got.to(at::kDouble), want, 1e-2, 0)) << what;
}

// Rank r's values for tensor k: k * 1000 + index + r (integers, exact in float).
inline at::Tensor values(int64_t n, int k, int r, at::ScalarType dtype) {
  return (at::arange(n, at::kDouble) + (k * 1000 + r)).to(dtype);
}

}  // namespace xlaunch::test
