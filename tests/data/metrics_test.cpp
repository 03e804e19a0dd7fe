// gather_for_metrics: exact results on a dataset whose size does not divide by the world size,
// with ranks as threads over the in-process communicator, compared with one process.
#include <gtest/gtest.h>

#include <ATen/ops/cat.h>
#include <ATen/ops/tensor.h>

#include <algorithm>
#include <functional>
#include <thread>

#include "test_datasets.h"
#include "comm/inprocess_communicator.h"
#include "metrics_ranks.h"
#include "xlaunch/metrics.h"

namespace {

using namespace xlaunch::test;

TEST(Metrics, DropPaddingKeepsRealPositionsInOrder) {
  // world 3, n = 10: shards of 4, global position p = j * 3 + r, positions 10 and 11 padding.
  at::Tensor gathered = at::empty({3, 4}, at::kLong);
  for (int r = 0; r < 3; ++r)
    for (int j = 0; j < 4; ++j) gathered[r][j] = j * 3 + r;
  const xlaunch::ShardSpan whole{0, 10, 3};
  EXPECT_EQ(to_vector(xlaunch::drop_padding(gathered, whole)),
            (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  // The batch of shard positions 2..3 on every rank: global 6..11, of which 6..9 are real.
  const xlaunch::ShardSpan last{2, 10, 3};
  EXPECT_EQ(to_vector(xlaunch::drop_padding(gathered.narrow(1, 2, 2), last)),
            (std::vector<int64_t>{6, 7, 8, 9}));
  const xlaunch::ShardSpan first{0, 10, 3};
  EXPECT_EQ(to_vector(xlaunch::drop_padding(gathered.narrow(1, 0, 2), first)),
            (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
}

TEST(Metrics, DropPaddingOfAnEpochResumedAtAnOffset) {
  // world 3, n = 10, resumed at global position 5: shards of 2, p = 5 + j * 3 + r, 10 padding.
  at::Tensor gathered = at::empty({3, 2}, at::kLong);
  for (int r = 0; r < 3; ++r)
    for (int j = 0; j < 2; ++j) gathered[r][j] = 5 + j * 3 + r;
  EXPECT_EQ(to_vector(xlaunch::drop_padding(gathered, xlaunch::ShardSpan{0, 10, 3, 5})),
            (std::vector<int64_t>{5, 6, 7, 8, 9}));
  EXPECT_EQ(to_vector(xlaunch::drop_padding(gathered.narrow(1, 1, 1), xlaunch::ShardSpan{1, 10, 3, 5})),
            (std::vector<int64_t>{8, 9}));
  EXPECT_EQ(to_vector(xlaunch::drop_padding(gathered.narrow(1, 0, 1), xlaunch::ShardSpan{0, 10, 3, 5})),
            (std::vector<int64_t>{5, 6, 7}));
}

// Each rank gathers every batch's targets; the concatenation must be exactly what one process
// reading the whole dataset sees, on every rank.
TEST(Metrics, GatherForMetricsIsExactWhenTheWorldDoesNotDivideTheDataset) {
  for (int world : {2, 3, 4}) {
    for (int64_t batch : {1, 2, 3}) {
      SCOPED_TRACE("world=" + std::to_string(world) + " batch=" + std::to_string(batch));
      const int64_t n = 10;
      xlaunch::Loader single(IndexDataset(n), options(batch * world, 0));
      const std::string expected = text(targets_of(run_epoch(single)));
      const auto per_batch = on_ranks(world, [&](xlaunch::Communicator& comm) {
        xlaunch::Loader loader(IndexDataset(n), options(batch, 2, comm.rank(), comm.size()));
        std::vector<int64_t> all;
        for (auto& b : loader) {
          const auto got = to_vector(xlaunch::gather_for_metrics(comm, b.target, b.span));
          all.insert(all.end(), got.begin(), got.end());
        }
        return text(all);
      });
      for (int r = 0; r < world; ++r) EXPECT_EQ(per_batch[r], expected) << "rank " << r;
      // The whole shard at once, after the epoch.
      const auto whole = on_ranks(world, [&](xlaunch::Communicator& comm) {
        xlaunch::Loader loader(IndexDataset(n), options(batch, 1, comm.rank(), comm.size()));
        std::vector<at::Tensor> mine;
        for (auto& b : loader) mine.push_back(b.target);
        return text(to_vector(xlaunch::gather_for_metrics(comm, at::cat(mine), loader.sampler().span(0))));
      });
      for (int r = 0; r < world; ++r) EXPECT_EQ(whole[r], expected) << "rank " << r;
    }
  }
}

TEST(Metrics, GatherForMetricsWithDropLastKeepsEveryGatheredRow) {
  const auto got = on_ranks(3, [&](xlaunch::Communicator& comm) {
    auto o = options(2, 1, comm.rank(), comm.size());
    o.drop_last = true;
    xlaunch::Loader loader(IndexDataset(10), o);
    std::vector<int64_t> all;
    for (auto& b : loader) {
      const auto v = to_vector(xlaunch::gather_for_metrics(comm, b.target, b.span));
      all.insert(all.end(), v.begin(), v.end());
    }
    std::sort(all.begin(), all.end());
    all.erase(std::unique(all.begin(), all.end()), all.end());
    return std::to_string(all.size());
  });
  for (const auto& g : got) EXPECT_EQ(g, "6");  // one batch of 2 on each of 3 ranks, all distinct
}

// Different row counts are fine (metrics_ragged_test.cpp); a different dtype is not.
TEST(Metrics, DisagreeingRanksGetAnErrorNotAHang) {
  const auto got = on_ranks(2, [](xlaunch::Communicator& comm) {
    const at::Tensor rows = at::zeros({2}, comm.rank() == 0 ? at::kFloat : at::kLong);
    xlaunch::gather_for_metrics(comm, rows, xlaunch::ShardSpan{0, 3, 2});
    return std::string("no error");
  });
  for (const auto& g : got)
    EXPECT_NE(g.find("they have different dtypes: rank 0 has [2] Float on cpu; rank 1 has [2] Long on cpu"),
              std::string::npos)
        << g;
}

}  // namespace
