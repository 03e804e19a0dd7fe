// What the 2-rank data-parallel tests share (ddp_*mpi_test.cpp): options for CPU ranks, and the
// comparison with one process doing the same work, which every rank computes itself (it can build
// every rank's batch).
#pragma once

#include <gtest/gtest.h>

#include <torch/nn/module.h>

#include "models.h"
#include "xlaunch/accelerator.h"

namespace xlaunch::test {

inline xlaunch::AcceleratorOptions cpu_options() {
  xlaunch::AcceleratorOptions o;
  o.cpu = true;
  o.num_threads = 1;
  return o;
}

// Every trainable parameter's gradient of `got` matches `want`'s (relative 1e-5).
inline void expect_same_grads(torch::nn::Module& got, torch::nn::Module& want, double tol = 1e-5) {
  auto ref = want.named_parameters();
  for (const auto& item : got.named_parameters()) {
    ASSERT_TRUE(item.value().grad().defined()) << item.key();
    EXPECT_LT(rel_err(item.value().grad(), ref[item.key()].grad()), tol) << item.key();
  }
}

// One synced backward of rank r's MLP batch `step` on 2 ranks, and the one-process reference's
// backward on both ranks' batches.
template <typename Model>
void backward_both(xlaunch::Accelerator& acc, Model& model, Mlp& reference, int step) {
  const auto mine = mlp_batch(acc.process_index(), step);
  acc.backward(loss_of(model(mine.x), mine.y));
  const auto all = concat({mlp_batch(0, step), mlp_batch(1, step)});
  loss_of(reference(all.x), all.y).backward();
}

inline void expect_same_params(torch::nn::Module& got, torch::nn::Module& want, double tol = 1e-5) {
  auto ref = want.named_parameters();
  for (const auto& item : got.named_parameters())
    EXPECT_LT(rel_err(item.value(), ref[item.key()]), tol) << item.key();
}

}  // namespace xlaunch::test

