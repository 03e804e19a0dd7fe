// DistributedSampler: literal values from PyTorch's DistributedSampler, and the shard properties
// over a grid of sizes and world sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "xlaunch/error.h"
#include "xlaunch/sampler.h"

namespace {

using xlaunch::SamplerOptions;
using Shards = std::vector<std::vector<int64_t>>;

Shards all_shards(int64_t n, int world, uint64_t seed, int64_t epoch, bool shuffle, bool drop_last) {
  Shards out;
  for (int r = 0; r < world; ++r)
    out.push_back(xlaunch::shard_indices(SamplerOptions{n, r, world, seed, shuffle, drop_last}, epoch));
  return out;
}

// Produced by torch.utils.data.DistributedSampler(range(n), num_replicas, rank, shuffle, seed,
// drop_last) with set_epoch(epoch), torch 2.11.
TEST(Sampler, MatchesPyTorchDistributedSampler) {
  EXPECT_EQ(all_shards(10, 3, 42, 0, true, false), (Shards{{2, 8, 0, 7}, {6, 4, 9, 2}, {1, 5, 3, 6}}));
  EXPECT_EQ(all_shards(10, 3, 42, 1, true, false), (Shards{{8, 0, 6, 3}, {4, 5, 7, 8}, {9, 1, 2, 4}}));
  EXPECT_EQ(all_shards(10, 3, 42, 0, true, true), (Shards{{2, 8, 0}, {6, 4, 9}, {1, 5, 3}}));
  EXPECT_EQ(all_shards(10, 3, 0, 0, false, false), (Shards{{0, 3, 6, 9}, {1, 4, 7, 0}, {2, 5, 8, 1}}));
  EXPECT_EQ(all_shards(2, 3, 7, 0, true, false), (Shards{{1}, {0}, {1}}));
}

TEST(Sampler, ShardsAreDisjointAndCover) {
  for (int64_t n : {0, 1, 2, 7, 10, 11, 64, 101}) {
    for (int world : {1, 2, 3, 4, 8}) {
      for (bool drop_last : {false, true}) {
        SCOPED_TRACE("n=" + std::to_string(n) + " world=" + std::to_string(world) +
                     " drop_last=" + std::to_string(drop_last));
        const Shards shards = all_shards(n, world, 5, 3, true, drop_last);
        xlaunch::DistributedSampler s0(SamplerOptions{n, 0, world, 5, true, drop_last});
        const int64_t per_rank = drop_last ? n / world : (n + world - 1) / world;
        EXPECT_EQ(s0.shard_size(), per_rank);
        std::multiset<int64_t> seen;
        // Real samples are the global positions p = j * world + r below real_positions().
        for (int r = 0; r < world; ++r) {
          ASSERT_EQ(static_cast<int64_t>(shards[r].size()), per_rank);
          for (int64_t j = 0; j < per_rank; ++j)
            if (j * world + r < s0.real_positions()) seen.insert(shards[r][j]);
        }
        EXPECT_EQ(static_cast<int64_t>(seen.size()), s0.real_positions());
        EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), seen.size()) << "a sample read twice";
        for (int64_t i : seen) EXPECT_TRUE(i >= 0 && i < n);
        if (!drop_last) EXPECT_EQ(static_cast<int64_t>(seen.size()), n) << "not every sample read";
      }
    }
  }
}

TEST(Sampler, PaddingAndDropLastCounts) {
  xlaunch::DistributedSampler even(SamplerOptions{10, 0, 4, 0, true, false});
  EXPECT_EQ(even.shard_size(), 3);
  EXPECT_EQ(even.padding(), 2);
  EXPECT_EQ(even.real_positions(), 10);
  xlaunch::DistributedSampler dropped(SamplerOptions{10, 0, 4, 0, true, true});
  EXPECT_EQ(dropped.shard_size(), 2);
  EXPECT_EQ(dropped.padding(), 0);
  EXPECT_EQ(dropped.real_positions(), 8);
  // Padding wraps around the epoch's list: ranks 2 and 3 end with the list's first two entries.
  const Shards s = all_shards(10, 4, 0, 0, true, false);
  EXPECT_EQ(s[2].back(), s[0].front());
  EXPECT_EQ(s[3].back(), s[1].front());
}

TEST(Sampler, EpochChangesTheOrderAndSeedIsShared) {
  xlaunch::DistributedSampler s(SamplerOptions{1000, 1, 4, 9, true, false});
  s.set_epoch(0);
  const auto e0 = s.indices();
  s.set_epoch(1);
  const auto e1 = s.indices();
  EXPECT_NE(e0, e1);
  s.set_epoch(0);
  EXPECT_EQ(s.indices(), e0) << "the same epoch must give the same order";
  xlaunch::DistributedSampler other_seed(SamplerOptions{1000, 1, 4, 10, true, false});
  EXPECT_NE(other_seed.indices(), e0);
  xlaunch::DistributedSampler sequential(SamplerOptions{1000, 1, 4, 9, false, false});
  sequential.set_epoch(7);
  EXPECT_EQ(sequential.indices()[0], 1);
  EXPECT_EQ(sequential.indices()[1], 5);
}

TEST(Sampler, WorldOfOneGetsEverything) {
  auto idx = xlaunch::shard_indices(SamplerOptions{50, 0, 1, 3, true, false}, 0);
  std::sort(idx.begin(), idx.end());
  for (int64_t i = 0; i < 50; ++i) EXPECT_EQ(idx[i], i);
}

TEST(Sampler, RejectsBadPlaces) {
  EXPECT_THROW(xlaunch::DistributedSampler(SamplerOptions{10, 2, 2, 0, true, false}), xlaunch::UsageError);
  EXPECT_THROW(xlaunch::DistributedSampler(SamplerOptions{10, -1, 2, 0, true, false}), xlaunch::UsageError);
  EXPECT_THROW(xlaunch::DistributedSampler(SamplerOptions{-1, 0, 1, 0, true, false}), xlaunch::UsageError);
}

}  // namespace
