// Failures and shutdown: a worker's exception reaches the training thread with the sample index;
// leaving an epoch early or destroying the loader never hangs and leaves no thread behind.
#include <gtest/gtest.h>
#include <torch/data/datasets/map.h>
#include <torch/data/transforms/stack.h>

#include <chrono>
#include <memory>

#include "test_datasets.h"
#include "xlaunch/loader.h"

namespace {

using namespace xlaunch::test;
using xlaunch::Loader;

TEST(LoaderErrors, WorkerExceptionCarriesTheSampleIndex) {
  start_aten_threads();
  const int threads_before = thread_count();
  for (int workers : {0, 1, 4}) {
    SCOPED_TRACE("workers=" + std::to_string(workers));
    auto o = options(8, workers);
    o.shuffle = false;  // sample 37 is in batch 4
    Loader loader(IndexDataset(100, /*fail_at=*/37), o);
    int64_t delivered = 0;
    try {
      for (auto& b : loader) {
        (void)b;
        ++delivered;
      }
      FAIL() << "the epoch ended without the sample's error";
    } catch (const xlaunch::SampleError& e) {
      EXPECT_EQ(e.index(), 37);
      const std::string what = e.what();
      EXPECT_NE(what.find("sample 37"), std::string::npos) << what;
      EXPECT_NE(what.find("bad sample on purpose"), std::string::npos) << what;
      EXPECT_NE(what.find("batch 4 of epoch 0"), std::string::npos) << what;
    }
    EXPECT_EQ(delivered, 4) << "the batches before the failing one arrive, in order";
    EXPECT_EQ(settled_thread_count(threads_before), threads_before);
  }
}

TEST(LoaderErrors, BatchDatasetFailureIsTracedToTheSample) {
  // A .map(Stack<>()) dataset loads whole batches; the failing sample is found by retrying one by one.
  auto o = options(8, 2);
  o.shuffle = false;
  Loader loader(IndexDataset(100, /*fail_at=*/21).map(torch::data::transforms::Stack<>()), o);
  try {
    run_epoch(loader);
    FAIL() << "the epoch ended without the sample's error";
  } catch (const xlaunch::SampleError& e) {
    EXPECT_EQ(e.index(), 21) << e.what();
    EXPECT_NE(std::string(e.what()).find("batch 2 of epoch 0"), std::string::npos) << e.what();
  }
}

TEST(LoaderErrors, BreakingOutEarlyJoinsTheWorkers) {
  start_aten_threads();
  const int threads_before = thread_count();
  Loader loader(IndexDataset(100000, -1, std::chrono::microseconds(200)), options(16, 4));
  const auto t0 = std::chrono::steady_clock::now();
  int n = 0;
  for (auto& b : loader) {
    (void)b;
    if (++n == 2) {
      EXPECT_GT(thread_count(), threads_before) << "workers should be running";
      break;
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(settled_thread_count(threads_before), threads_before) << thread_names();
  EXPECT_LT(s, 5.0) << "leaving the epoch waited for the rest of it";
}

TEST(LoaderErrors, DestroyingTheLoaderMidEpochIsSafe) {
  start_aten_threads();
  const int threads_before = thread_count();
  {
    auto loader = std::make_unique<Loader>(IndexDataset(100000, -1, std::chrono::microseconds(100)),
                                           options(16, 3));
    auto it = loader->begin();
    ++it;
    loader.reset();  // the epoch keeps what it needs alive
    ++it;
    EXPECT_EQ(it->index, 2);
  }
  EXPECT_EQ(settled_thread_count(threads_before), threads_before);
  {
    Loader loader(IndexDataset(100000, -1, std::chrono::microseconds(100)), options(16, 3));
    auto it = loader.begin();
  }
  EXPECT_EQ(settled_thread_count(threads_before), threads_before);
}

struct RaggedDataset : torch::data::datasets::Dataset<RaggedDataset> {
  torch::data::Example<> get(size_t i) override {
    return {at::arange(static_cast<int64_t>(2 + i % 2), at::kFloat), at::scalar_tensor(0, at::kLong)};
  }
  std::optional<size_t> size() const override { return 10; }
};

TEST(LoaderErrors, SamplesOfDifferentShapesAreAUsageError) {
  Loader loader(RaggedDataset(), options(4, 2));
  try {
    run_epoch(loader);
    FAIL() << "no error for ragged samples";
  } catch (const xlaunch::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("same shape"), std::string::npos) << e.what();
  }
}

}  // namespace
