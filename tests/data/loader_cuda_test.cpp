// The device path: pinned collation and side-stream copies. Runs where a GPU exists; elsewhere
// the tests skip, saying why, and the CPU-only behaviour (a clear error) is checked.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#if XLAUNCH_HAVE_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "test_datasets.h"
#include "xlaunch/loader.h"

namespace {

using namespace xlaunch::test;

#define SKIP_WITHOUT_GPU()                                                                        \
  do {                                                                                            \
    if (!XLAUNCH_HAVE_CUDA) GTEST_SKIP() << "built without CUDA device paths (XLAUNCH_HAVE_CUDA=0)"; \
    if (!torch::cuda::is_available())                                                             \
      GTEST_SKIP() << "no CUDA device here (torch::cuda::is_available() is false)";               \
  } while (0)

TEST(LoaderCuda, AskingForCudaWithoutAGpuSaysWhy) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a GPU is present: this checks the CPU-only error";
  auto o = options(4, 1);
  o.device = c10::Device(c10::kCUDA, 0);
  try {
    xlaunch::Loader loader(IndexDataset(10), o);
    FAIL() << "no error for a CUDA device without a GPU";
  } catch (const xlaunch::UsageError& e) {
    const std::string what = e.what();
    EXPECT_TRUE(what.find("no CUDA device") != std::string::npos ||
                what.find("without CUDA device paths") != std::string::npos)
        << what;
  }
}

#if XLAUNCH_HAVE_CUDA
void expect_device_batches_match_cpu(bool pin_memory, int workers) {
  xlaunch::Loader cpu(IndexDataset(300), options(16, 0));
  auto o = options(16, workers);
  o.device = c10::Device(c10::kCUDA, 0);
  o.pin_memory = pin_memory;
  xlaunch::Loader gpu(IndexDataset(300), o);
  for (int epoch = 0; epoch < 2; ++epoch) {
    const auto expected = run_epoch(cpu);
    size_t k = 0;
    for (auto& b : gpu) {
      ASSERT_TRUE(b.data.is_cuda());
      ASSERT_TRUE(b.target.is_cuda());
      // Consumed on the current stream right after the hand-over: must see the copied values.
      EXPECT_TRUE(b.data.mul(2).cpu().equal(expected.at(k).data.mul(2))) << "batch " << k;
      EXPECT_TRUE(b.target.cpu().equal(expected.at(k).target)) << "batch " << k;
      ++k;
    }
    EXPECT_EQ(k, expected.size());
  }
}
#endif

TEST(LoaderCuda, PinnedDeviceBatchesMatchTheCpuBatches) {
  SKIP_WITHOUT_GPU();
#if XLAUNCH_HAVE_CUDA
  for (int workers : {0, 2}) expect_device_batches_match_cpu(true, workers);
#endif
}

TEST(LoaderCuda, PageableDeviceBatchesMatchTheCpuBatches) {
  SKIP_WITHOUT_GPU();
#if XLAUNCH_HAVE_CUDA
  expect_device_batches_match_cpu(false, 2);
#endif
}

TEST(LoaderCuda, HandOverOrdersANonDefaultCurrentStream) {
  SKIP_WITHOUT_GPU();
#if XLAUNCH_HAVE_CUDA
  c10::cuda::CUDAStreamGuard guard(c10::cuda::getStreamFromPool(false, 0));
  auto o = options(64, 2);
  o.device = c10::Device(c10::kCUDA, 0);
  xlaunch::Loader gpu(IndexDataset(4096), o);
  double sum = 0;
  for (auto& b : gpu) sum += b.target.sum().item<double>();  // reads on the guarded stream
  EXPECT_EQ(sum, 4095.0 * 4096.0 / 2.0);
#endif
}

}  // namespace
