// The loader's order, counts, epochs, skipping and dataset kinds, on the CPU.
#include <gtest/gtest.h>
#include <torch/data/datasets/map.h>
#include <torch/data/transforms/lambda.h>
#include <torch/data/transforms/stack.h>

#include <cstdlib>

#include "test_datasets.h"
#include "xlaunch/loader.h"

namespace {

using namespace xlaunch::test;
using xlaunch::Batch;
using xlaunch::Loader;

void expect_same(const std::vector<Batch>& a, const std::vector<Batch>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k) {
    SCOPED_TRACE("batch " + std::to_string(k));
    EXPECT_EQ(a[k].index, b[k].index);
    EXPECT_EQ(a[k].span.first_position, b[k].span.first_position);
    EXPECT_TRUE(a[k].data.equal(b[k].data));
    EXPECT_TRUE(a[k].target.equal(b[k].target));
  }
}

// Batch k holds the shard positions [k*b, (k+1)*b) with sample i's values.
void expect_contents(const std::vector<Batch>& batches, const std::vector<int64_t>& shard, int64_t b) {
  size_t pos = 0;
  for (size_t k = 0; k < batches.size(); ++k) {
    EXPECT_EQ(batches[k].index, static_cast<int64_t>(k));
    EXPECT_EQ(batches[k].span.first_position, static_cast<int64_t>(k) * b);
    for (int64_t r = 0; r < batches[k].size(); ++r, ++pos) {
      const int64_t i = shard.at(pos);
      EXPECT_EQ(batches[k].target[r].item<int64_t>(), i);
      EXPECT_EQ(batches[k].data[r][2].item<float>(), static_cast<float>(10 * i + 2));
    }
  }
  EXPECT_EQ(pos, shard.size());
}

TEST(Loader, SameBatchesForZeroOneAndFourWorkers) {
  Loader ref(IndexDataset(103), options(8, 0, 1, 2));
  const auto ref0 = run_epoch(ref);
  const auto ref1 = run_epoch(ref);
  xlaunch::DistributedSampler s = ref.sampler();
  s.set_epoch(0);
  expect_contents(ref0, s.indices(), 8);
  for (int workers : {1, 4}) {
    for (int prefetch : {1, 3}) {
      SCOPED_TRACE("workers=" + std::to_string(workers) + " prefetch=" + std::to_string(prefetch));
      auto o = options(8, workers, 1, 2);
      o.prefetch_factor = prefetch;
      Loader loader(IndexDataset(103), o);
      expect_same(run_epoch(loader), ref0);
      expect_same(run_epoch(loader), ref1);
    }
  }
}

TEST(Loader, RowDatasetGivesTheSameBatches) {
  Loader torch_ds(IndexDataset(50), options(7, 2));
  Loader rows(std::make_shared<IndexRows>(50), options(7, 2));
  expect_same(run_epoch(rows), run_epoch(torch_ds));
}

TEST(Loader, MapDatasetsPlugIn) {
  Loader plain(IndexDataset(20), options(6, 1));
  const auto expected = run_epoch(plain);
  // .map(Stack<>()): get_batch returns one stacked Example.
  Loader stacked(IndexDataset(20).map(torch::data::transforms::Stack<>()), options(6, 1));
  expect_same(run_epoch(stacked), expected);
  // .map(a per-example transform): get_batch returns a vector of examples.
  auto add_one = torch::data::transforms::Lambda<torch::data::Example<>>(
      [](torch::data::Example<> e) { return torch::data::Example<>{e.data + 1, e.target}; });
  Loader mapped(IndexDataset(20).map(add_one), options(6, 1));
  const auto got = run_epoch(mapped);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t k = 0; k < got.size(); ++k) EXPECT_TRUE(got[k].data.equal(expected[k].data + 1));
}

TEST(Loader, BatchCountsWithEvenBatchesAndDropLast) {
  struct Case {
    int64_t n, b;
    int world;
    bool drop_last;
    std::vector<int64_t> sizes;  // every rank's batch sizes
  };
  const std::vector<Case> cases = {
      {10, 2, 4, false, {2, 1}}, {10, 2, 4, true, {2}},    {10, 2, 3, false, {2, 2}},
      {10, 2, 3, true, {2}},     {11, 4, 2, false, {4, 2}}, {11, 4, 2, true, {4}},
      {3, 4, 4, false, {1}},     {3, 4, 4, true, {}},
  };
  for (const auto& c : cases) {
    for (int r = 0; r < c.world; ++r) {
      SCOPED_TRACE("n=" + std::to_string(c.n) + " b=" + std::to_string(c.b) + " world=" +
                   std::to_string(c.world) + " drop_last=" + std::to_string(c.drop_last) +
                   " rank=" + std::to_string(r));
      auto o = options(c.b, 2, r, c.world);
      o.drop_last = c.drop_last;
      Loader loader(IndexDataset(c.n), o);
      EXPECT_EQ(loader.num_batches(), static_cast<int64_t>(c.sizes.size()));
      std::vector<int64_t> sizes;
      for (auto& b : loader) sizes.push_back(b.size());
      EXPECT_EQ(sizes, c.sizes);
    }
  }
}

TEST(Loader, NewEpochChangesTheOrderAndSetEpochReplays) {
  Loader loader(IndexDataset(64), options(8, 2));
  EXPECT_EQ(loader.epoch(), 0);
  const auto e0 = targets_of(run_epoch(loader));
  EXPECT_EQ(loader.epoch(), 1);
  const auto e1 = targets_of(run_epoch(loader));
  EXPECT_NE(e0, e1);
  loader.set_epoch(0);
  EXPECT_EQ(targets_of(run_epoch(loader)), e0);
}

TEST(Loader, SkipFirstBatchesResumesMidEpoch) {
  Loader full(IndexDataset(64), options(8, 2));
  const auto all = run_epoch(full);
  Loader resumed(IndexDataset(64), options(8, 2));
  resumed.skip_first_batches(3);
  const auto rest = run_epoch(resumed);
  ASSERT_EQ(rest.size(), all.size() - 3);
  expect_same(rest, std::vector<Batch>(all.begin() + 3, all.end()));
  // Only the next epoch skips.
  const auto next = run_epoch(resumed);
  EXPECT_EQ(next.size(), all.size());
  EXPECT_EQ(next.front().index, 0);
  resumed.skip_first_batches(100);
  EXPECT_TRUE(run_epoch(resumed).empty());
}

TEST(Loader, AutoWorkersChoosesAndKeepsTheOrder) {
  Loader ref(IndexDataset(200), options(4, 0));
  Loader autoload(IndexDataset(200), options(4, xlaunch::kAutoWorkers));
  EXPECT_EQ(autoload.num_workers(), xlaunch::kAutoWorkers);
  expect_same(run_epoch(autoload), run_epoch(ref));
  EXPECT_GE(autoload.num_workers(), 1);
}

TEST(Loader, WithPlaceGivesTheRanksShardAndTracksTheLastSpan) {
  const Loader user(IndexDataset(10), options(2, 1));  // as a user builds it: rank 0 of 1
  Loader mine = user.with_place(2, 3, c10::Device(c10::kCPU));
  EXPECT_EQ(mine.options().rank, 2);
  EXPECT_EQ(mine.sampler().shard_size(), 4);
  xlaunch::DistributedSampler expected(xlaunch::SamplerOptions{10, 2, 3, 3, true, false});
  std::vector<int64_t> seen;
  for (auto& b : mine) {
    EXPECT_EQ(mine.last_span().first_position, b.span.first_position);
    EXPECT_EQ(mine.last_span().world_size, 3);
    for (int64_t r = 0; r < b.size(); ++r) seen.push_back(b.target[r].item<int64_t>());
  }
  EXPECT_EQ(seen, expected.indices());
  EXPECT_EQ(mine.last_span().first_position, 2);
}

TEST(Loader, OptionsFromTheEnvironment) {
  setenv("XLAUNCH_NUM_WORKERS", "auto", 1);
  setenv("XLAUNCH_PREFETCH_FACTOR", "5", 1);
  setenv("XLAUNCH_PIN_MEMORY", "0", 1);
  auto o = xlaunch::LoaderOptions::from_env();
  EXPECT_EQ(o.num_workers, xlaunch::kAutoWorkers);
  EXPECT_EQ(o.prefetch_factor, 5);
  EXPECT_FALSE(o.pin_memory);
  setenv("XLAUNCH_NUM_WORKERS", "3", 1);
  EXPECT_EQ(xlaunch::LoaderOptions::from_env().num_workers, 3);
  setenv("XLAUNCH_NUM_WORKERS", "three", 1);
  // Building an options struct never reads the environment, so it cannot throw.
  EXPECT_EQ(xlaunch::LoaderOptions().num_workers, 2);
  try {
    xlaunch::LoaderOptions::from_env();
    FAIL() << "no error for XLAUNCH_NUM_WORKERS=three";
  } catch (const xlaunch::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("XLAUNCH_NUM_WORKERS"), std::string::npos) << e.what();
  }
  unsetenv("XLAUNCH_NUM_WORKERS");
  unsetenv("XLAUNCH_PREFETCH_FACTOR");
  unsetenv("XLAUNCH_PIN_MEMORY");
  // The struct's defaults are the variables' defaults (env_vars.h): one meaning either way.
  const auto from_env = xlaunch::LoaderOptions::from_env();
  const xlaunch::LoaderOptions defaults;
  EXPECT_EQ(defaults.num_workers, from_env.num_workers);
  EXPECT_EQ(defaults.prefetch_factor, from_env.prefetch_factor);
  EXPECT_EQ(defaults.pin_memory, from_env.pin_memory);
}

TEST(Loader, RejectsBadOptions) {
  EXPECT_THROW(Loader(IndexDataset(10), options(0, 1)), xlaunch::UsageError);
  auto o = options(2, 1);
  o.prefetch_factor = 0;
  EXPECT_THROW(Loader(IndexDataset(10), o), xlaunch::UsageError);
  EXPECT_THROW(Loader(IndexDataset(10), options(2, 1, 3, 2)), xlaunch::UsageError);
}

}  // namespace
