// gather_for_metrics when the ranks pass different row counts for the same batch (shards that end
// at different batches, a rank that drops its own padded row) or outputs of different lengths
// (padded across the ranks first), with ranks as threads; compared with one process.
#include <gtest/gtest.h>

#include <ATen/ops/arange.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <functional>
#include <thread>

#include "comm/inprocess_communicator.h"
#include "metrics_ranks.h"
#include "comm/ragged.h"
#include "xlaunch/metrics.h"

namespace {

using namespace xlaunch::test;

// Rank r's shard positions of a dataset of n on `world` ranks, strided and without padding (a
// shard ends where the data does): r, r + world, ... < n.
std::vector<int64_t> unpadded_shard(int64_t n, int r, int world) {
  std::vector<int64_t> p;
  for (int64_t q = r; q < n; q += world) p.push_back(q);
  return p;
}

TEST(MetricsRagged, SampleRowsOfDifferentRowCountsInGlobalOrder) {
  // 3 ranks padded to 2 rows: rank 0 had 2 (positions 6, 9), ranks 1 and 2 one each (7, 8).
  EXPECT_EQ(xlaunch::ragged_sample_rows({2, 1, 1}, 2, xlaunch::ShardSpan{2, 10, 3}),
            (std::vector<int64_t>{0, 2, 4, 1}));
  // Position 10 (rank 1's second row) is the even sampler's padding: dropped.
  EXPECT_EQ(xlaunch::ragged_sample_rows({2, 2, 0}, 2, xlaunch::ShardSpan{2, 10, 3}),
            (std::vector<int64_t>{0, 2, 1}));
  // Resumed at offset 5: row 0 of rank 1 is position 5 + 0 * 2 + 1 = 6.
  EXPECT_EQ(xlaunch::ragged_sample_rows({1, 2}, 2, xlaunch::ShardSpan{0, 9, 2, 5}), (std::vector<int64_t>{0, 2, 3}));
}

TEST(MetricsRagged, ShardsEndingAtDifferentBatchesGatherEverySampleOnceInOrder) {
  // One process reads positions 0 .. n-1 in order; the prediction of position p is 10 * p.
  for (int world : {2, 3}) {
    for (int64_t batch : {1, 2, 3}) {
      const int64_t n = 10;
      SCOPED_TRACE("world=" + std::to_string(world) + " batch=" + std::to_string(batch));
      std::vector<int64_t> expected;
      for (int64_t p = 0; p < n; ++p) expected.push_back(10 * p);
      const int64_t longest = static_cast<int64_t>(unpadded_shard(n, 0, world).size());
      const auto got = on_ranks(world, [&](xlaunch::Communicator& comm) {
        const auto mine = unpadded_shard(n, comm.rank(), world);
        std::vector<int64_t> all;
        // Every rank takes part in every batch: a rank whose shard ended passes 0 rows.
        for (int64_t first = 0; first < longest; first += batch) {
          const int64_t from = std::min<int64_t>(first, static_cast<int64_t>(mine.size()));
          const int64_t to = std::min<int64_t>(first + batch, static_cast<int64_t>(mine.size()));
          const std::vector<int64_t> rows(mine.begin() + from, mine.begin() + to);
          const at::Tensor preds = at::tensor(rows, at::kLong) * 10;
          const auto g = to_vector(xlaunch::gather_for_metrics(comm, preds, xlaunch::ShardSpan{first, n, world}));
          all.insert(all.end(), g.begin(), g.end());
        }
        return text(all);
      });
      for (int r = 0; r < world; ++r) EXPECT_EQ(got[r], text(expected)) << "rank " << r;
    }
  }
}

TEST(MetricsRagged, TheEvenSamplersPaddingIsStillDroppedWhenRowCountsDiffer) {
  // n = 10 on 3 ranks, even: shards of 4, positions 10 (rank 1) and 11 (rank 2) are padding.
  // Rank 2 cuts its padded row itself, rank 1 does not: the result is still 0..9 once each.
  const auto got = on_ranks(3, [](xlaunch::Communicator& comm) {
    std::vector<int64_t> rows;
    for (int64_t j = 0; j < 4; ++j) rows.push_back(j * 3 + comm.rank());
    if (comm.rank() == 2) rows.pop_back();
    const at::Tensor preds = at::tensor(rows, at::kLong).unsqueeze(1).repeat({1, 2});  // [rows, 2]
    return text(to_vector(xlaunch::gather_for_metrics(comm, preds, xlaunch::ShardSpan{0, 10, 3}).select(1, 1)));
  });
  for (const auto& g : got) EXPECT_EQ(g, "0 1 2 3 4 5 6 7 8 9 ");
}

TEST(MetricsRagged, OutputsOfDifferentLengthsArePaddedAcrossRanksThenGathered) {
  // Each rank's batch of 2 samples produces sequences of length 1 + rank, padded to the longest
  // (2) with -1. One process, for positions p = 2 j + r of n = 4 on 2 ranks: the row of position p
  // is p in its first r + 1 columns, then -1.
  const auto got = on_ranks(2, [](xlaunch::Communicator& comm) {
    const int r = comm.rank();
    const at::Tensor positions = at::tensor({r, 2 + r}, at::kLong);
    const at::Tensor seqs = positions.unsqueeze(1).repeat({1, 1 + r});
    const at::Tensor padded = xlaunch::pad_across(comm, seqs, 1, -1, false);
    return text(to_vector(xlaunch::gather_for_metrics(comm, padded, xlaunch::ShardSpan{0, 4, 2}).view(-1)));
  });
  for (const auto& g : got) EXPECT_EQ(g, "0 -1 1 1 2 -1 3 3 ");
}

TEST(MetricsRagged, ADifferenceBeyondDimZeroOrPositionIsAnErrorOnEveryRank) {
  auto got = on_ranks(3, [](xlaunch::Communicator& comm) {
    xlaunch::gather_for_metrics(comm, at::zeros({comm.rank() + 1, comm.rank() == 2 ? 4 : 3}),
                                xlaunch::ShardSpan{0, 9, 3});
    return std::string("no error");
  });
  for (const auto& g : got)
    EXPECT_NE(g.find("gather_for_metrics: they differ in dim 1: rank 0 has [1, 3] Float on cpu; rank 1 has "
                     "[2, 3] Float on cpu; rank 2 has [3, 4] Float on cpu; every rank must pass its results for "
                     "the same batch number"),
              std::string::npos)
        << g;
  got = on_ranks(2, [](xlaunch::Communicator& comm) {
    xlaunch::gather_for_metrics(comm, at::zeros({2}), xlaunch::ShardSpan{comm.rank() * 2, 9, 2});
    return std::string("no error");
  });
  for (const auto& g : got)
    EXPECT_NE(g.find("rank 1's rows start at shard position 2, rank 0's at 0"), std::string::npos) << g;
}

}  // namespace
