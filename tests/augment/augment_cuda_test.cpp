// The augmentation pipeline on a GPU equals the CPU's (within 1e-4): the same draws (made on the
// host), the grid path on the device against the CPU kernel. Skips, saying why, without a GPU.
#include <gtest/gtest.h>

#include <ATen/TensorOperators.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/rand.h>
#include <torch/cuda.h>

#include "xlaunch/augment.h"

namespace xlaunch::augment {
namespace {

TEST(AugmentCuda, PipelineOnTheGpuEqualsTheCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: the GPU pipeline runs in the GPU bundle";
  Sequential seq({make("RandomAffine", {{"degrees", {30}}, {"translate", {0.1, 0.1}}, {"scale", {0.8, 1.2}},
                                        {"shear", {10}}, {"p", {0.7}}}),
                  make("RandomPerspective", {{"distortion_scale", {0.5}}, {"p", {0.7}}}),
                  make("RandomHorizontalFlip"), make("RandomResizedCrop", {{"size", {48, 40}}})});
  for (const auto& shape : {std::vector<int64_t>{16, 3, 32, 32}, std::vector<int64_t>{4, 1, 64, 96}}) {
    const at::Tensor x = at::rand(shape);
    BatchKey key{29, 1, {}};
    for (int64_t i = 0; i < shape[0]; ++i) key.ids.push_back(100 + 3 * i);
    const at::Tensor cpu = seq(x, key);
    const at::Tensor gpu = seq(x.to(at::kCUDA), key);
    ASSERT_TRUE(gpu.is_cuda());
    ASSERT_EQ(gpu.sizes(), cpu.sizes());
    EXPECT_LE((gpu.cpu() - cpu).abs().max().item<double>(), 1e-4);
  }
}

}  // namespace
}  // namespace xlaunch::augment
