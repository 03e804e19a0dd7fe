// The augmentation pipeline on a GPU equals the CPU's (within 1e-4): the same draws (made on the
// host), the grid path and the ATen colour steps on the device against the CPU kernels, by hand
// and through the loader's hand-over. Skips, saying why, without a GPU.
#include <gtest/gtest.h>

#include <ATen/TensorOperators.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/rand.h>
#include <torch/cuda.h>
#include <torch/data/datasets/base.h>
#include <torch/data/example.h>

#include "known_images.h"
#include "xlaunch/loader.h"

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

std::shared_ptr<const Sequential> guide_pipeline() {
  return std::make_shared<Sequential>(std::vector<std::shared_ptr<Transform>>{
      make("ColorJitter", {{"brightness", {0.4}}, {"contrast", {0.4}}, {"saturation", {0.4}}, {"hue", {0.1}}}),
      make("RandomAffine", {{"degrees", {15}}, {"translate", {0.1, 0.1}}, {"p", {1}}}),
      make("RandomPerspective", {{"distortion_scale", {0.5}}, {"p", {1}}}),
      make("Normalize", {{"mean", {0.5, 0.4, 0.3}}, {"std", {0.2, 0.25, 0.3}}})});
}

TEST(AugmentCuda, ColourAndGeometryOnTheGpuEqualTheCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: the GPU pipeline runs in the GPU bundle";
  const at::Tensor x = at::rand({32, 3, 40, 36});
  BatchKey key{5, 2, {}};
  for (int64_t i = 0; i < 32; ++i) key.ids.push_back(7 * i + 1);
  const at::Tensor cpu = (*guide_pipeline())(x, key);
  const at::Tensor gpu = (*guide_pipeline())(x.to(at::kCUDA), key);
  ASSERT_TRUE(gpu.is_cuda());
  EXPECT_LE((gpu.cpu() - cpu).abs().max().item<double>(), 1e-4);
}

// The loader's CUDA path: the batch copied from pinned memory on a side stream, then augmented at
// hand-over on the training stream with parameters copied non_blocking: the batches must equal a
// CPU loader's augmented batches.
TEST(AugmentCuda, LoaderAugmentsOnTheGpuAsOnTheCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: the GPU pipeline runs in the GPU bundle";
  LoaderOptions o;
  o.batch_size = 8;
  o.num_workers = 2;
  o.seed = 3;
  o.augment = guide_pipeline();
  Loader on_cpu(KnownImages(24, 20, 40), o);
  o.device = c10::Device(c10::kCUDA);
  Loader on_gpu(KnownImages(24, 20, 40), o);
  std::vector<at::Tensor> expected;
  for (auto& b : on_cpu) expected.push_back(b.data.clone());
  size_t k = 0;
  for (auto& b : on_gpu) {
    ASSERT_LT(k, expected.size());
    ASSERT_TRUE(b.data.is_cuda());
    EXPECT_LE((b.data.cpu() - expected[k]).abs().max().item<double>(), 1e-4) << "batch " << k;
    ++k;
  }
  EXPECT_EQ(k, expected.size());
}

}  // namespace
}  // namespace xlaunch::augment
