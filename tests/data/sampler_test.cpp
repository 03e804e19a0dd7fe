// DistributedSampler: literal values from PyTorch's DistributedSampler, and the shard properties
// over a grid of sizes and world sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
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

// ---- epochs started at an offset (a resume on another world size) ----------------------------

Shards offset_shards(int64_t n, int world, int64_t offset, bool shuffle, bool drop_last, uint64_t seed = 42) {
  Shards out;
  for (int r = 0; r < world; ++r)
    out.push_back(xlaunch::shard_indices(SamplerOptions{n, r, world, seed, shuffle, drop_last}, 0, offset));
  return out;
}

TEST(SamplerOffset, LiteralShards) {
  // Sequential order 0..9 from position 4 on 3 ranks: rank r takes 4 + r, 7 + r.
  EXPECT_EQ(offset_shards(10, 3, 4, false, false), (Shards{{4, 7}, {5, 8}, {6, 9}}));
  // From position 3 on 4 ranks: 7 remain, padded to 8 with the list's first entry.
  EXPECT_EQ(offset_shards(10, 4, 3, false, false), (Shards{{3, 7}, {4, 8}, {5, 9}, {6, 0}}));
  EXPECT_EQ(offset_shards(10, 4, 3, false, true), (Shards{{3}, {4}, {5}, {6}}));
  EXPECT_EQ(offset_shards(10, 2, 9, false, false), (Shards{{9}, {0}}));
  EXPECT_EQ(offset_shards(10, 3, 10, false, false), (Shards{{}, {}, {}}));
  // Shuffled: PyTorch's order for n 10, seed 42, epoch 0 is 2 6 1 8 4 5 0 9 3 7 (the shards of
  // MatchesPyTorchDistributedSampler, interleaved).
  EXPECT_EQ(offset_shards(10, 1, 0, true, false), (Shards{{2, 6, 1, 8, 4, 5, 0, 9, 3, 7}}));
  EXPECT_EQ(offset_shards(10, 3, 4, true, false), (Shards{{4, 9}, {5, 3}, {0, 7}}));
  EXPECT_EQ(offset_shards(10, 4, 3, true, false), (Shards{{8, 9}, {4, 3}, {5, 7}, {0, 2}}));
  EXPECT_EQ(offset_shards(10, 4, 3, true, true), (Shards{{8}, {4}, {5}, {0}}));
}

TEST(SamplerOffset, CountsAndSpan) {
  xlaunch::DistributedSampler s(SamplerOptions{10, 1, 4, 0, true, false});
  s.set_offset(3);
  EXPECT_EQ(s.offset(), 3);
  EXPECT_EQ(s.shard_size(), 2);
  EXPECT_EQ(s.real_positions(), 10);
  EXPECT_EQ(s.padding(), 1);
  const xlaunch::ShardSpan span = s.span(1);
  EXPECT_EQ(span.first_position, 1);
  EXPECT_EQ(span.offset, 3);
  EXPECT_EQ(span.real_positions, 10);
  EXPECT_EQ(span.world_size, 4);
  xlaunch::DistributedSampler dropped(SamplerOptions{10, 1, 4, 0, true, true});
  dropped.set_offset(3);
  EXPECT_EQ(dropped.shard_size(), 1);
  EXPECT_EQ(dropped.real_positions(), 7);
  EXPECT_EQ(dropped.padding(), 0);
  EXPECT_EQ(xlaunch::shard_size(SamplerOptions{10, 0, 4, 0, true, false}, 3), 2);
  EXPECT_EQ(xlaunch::shard_size(SamplerOptions{10, 0, 4, 0, true, false}), 3);
}

// For every offset and world size: the real positions of the ranks' shards are the positions
// offset.. of the epoch's order (world 1), each exactly once; the padding (fewer than world
// entries) is the order's first entries; drop_last cuts fewer than world.
TEST(SamplerOffset, EveryRemainingPositionExactlyOnce) {
  for (int64_t n : {0, 1, 7, 10, 23, 101}) {
    const std::vector<int64_t> order = xlaunch::shard_indices(SamplerOptions{n, 0, 1, 9, true, false}, 2);
    for (int64_t offset = 0; offset <= n; offset += (n > 30 ? 7 : 1)) {
      for (int world = 1; world <= 5; ++world) {
        for (bool drop_last : {false, true}) {
          SCOPED_TRACE("n=" + std::to_string(n) + " offset=" + std::to_string(offset) + " world=" +
                       std::to_string(world) + " drop_last=" + std::to_string(drop_last));
          std::vector<int64_t> by_position;  // interleave the shards back into global order
          Shards shards;
          for (int r = 0; r < world; ++r)
            shards.push_back(xlaunch::shard_indices(SamplerOptions{n, r, world, 9, true, drop_last}, 2, offset));
          for (size_t j = 0; j < shards[0].size(); ++j)
            for (int r = 0; r < world; ++r) {
              ASSERT_EQ(shards[r].size(), shards[0].size());
              by_position.push_back(shards[r][j]);
            }
          const int64_t remaining = n - offset, read = static_cast<int64_t>(by_position.size());
          if (drop_last) {
            EXPECT_EQ(read, remaining / world * world);
          } else {
            EXPECT_EQ(read, (remaining + world - 1) / world * world);
          }
          for (int64_t p = 0; p < read; ++p) {
            const int64_t global = offset + p;
            EXPECT_EQ(by_position[p], order[global % n]) << "global position " << global;  // padding wraps
          }
          xlaunch::DistributedSampler s(SamplerOptions{n, 0, world, 9, true, drop_last});
          s.set_offset(offset);
          EXPECT_EQ(s.shard_size(), static_cast<int64_t>(shards[0].size()));
          EXPECT_EQ(s.real_positions(), std::min(n, offset + read));
          EXPECT_EQ(s.padding(), offset + read - s.real_positions());
          EXPECT_LT(s.padding(), world);
        }
      }
    }
  }
}

// A job stopped after k batches of b on 4 ranks has read the positions [0, 4kb); continued on
// any world size from there, the two jobs together read every sample once, plus only padding.
TEST(SamplerOffset, StoppedOnFourAndContinuedOnAnyWorldReadsEverySampleOnce) {
  const int64_t n = 101, b = 4;
  for (int64_t k : {0, 1, 3, 6}) {
    for (int world : {1, 2, 3, 4, 5}) {
      SCOPED_TRACE("k=" + std::to_string(k) + " world=" + std::to_string(world));
      std::map<int64_t, int> count;
      for (int r = 0; r < 4; ++r) {
        const auto shard = xlaunch::shard_indices(SamplerOptions{n, r, 4, 1, true, false}, 5);
        for (int64_t j = 0; j < k * b; ++j) ++count[shard[j]];
      }
      const int64_t consumed = k * b * 4;
      std::vector<int64_t> padded;
      for (int r = 0; r < world; ++r) {
        const auto shard = xlaunch::shard_indices(SamplerOptions{n, r, world, 1, true, false}, 5, consumed);
        for (size_t j = 0; j < shard.size(); ++j) {
          if (consumed + static_cast<int64_t>(j) * world + r >= n) padded.push_back(shard[j]);
          ++count[shard[j]];
        }
      }
      ASSERT_EQ(static_cast<int64_t>(count.size()), n) << "a sample was never read";
      int64_t extra = 0;
      for (const auto& [i, c] : count) extra += c - 1;
      EXPECT_EQ(extra, static_cast<int64_t>(padded.size())) << "a sample was read twice outside the padding";
      EXPECT_EQ(static_cast<int64_t>(padded.size()), (world - (n - consumed) % world) % world);
    }
  }
}

// An offset that is a multiple of the world size gives the tail of the whole epoch's shard: the
// loader's resume on its own layout is the uninterrupted epoch.
TEST(SamplerOffset, MultipleOfTheWorldIsTheTailOfTheWholeShard) {
  for (bool drop_last : {false, true})
    for (int r = 0; r < 3; ++r) {
      const SamplerOptions o{23, r, 3, 4, true, drop_last};
      const auto whole = xlaunch::shard_indices(o, 1);
      for (int64_t j = 0; j * 3 <= 23; ++j)
        EXPECT_EQ(xlaunch::shard_indices(o, 1, j * 3), std::vector<int64_t>(whole.begin() + j, whole.end()));
    }
}

TEST(SamplerOffset, RejectsAnOffsetOutsideTheDataset) {
  xlaunch::DistributedSampler s(SamplerOptions{10, 0, 2, 0, true, false});
  EXPECT_THROW(s.set_offset(11), xlaunch::UsageError);
  EXPECT_THROW(s.set_offset(-1), xlaunch::UsageError);
  EXPECT_THROW(xlaunch::shard_indices(SamplerOptions{10, 0, 2, 0, true, false}, 0, 12), xlaunch::UsageError);
  s.set_offset(10);
  EXPECT_EQ(s.shard_size(), 0);
}

TEST(Sampler, RejectsBadPlaces) {
  EXPECT_THROW(xlaunch::DistributedSampler(SamplerOptions{10, 2, 2, 0, true, false}), xlaunch::UsageError);
  EXPECT_THROW(xlaunch::DistributedSampler(SamplerOptions{10, -1, 2, 0, true, false}), xlaunch::UsageError);
  EXPECT_THROW(xlaunch::DistributedSampler(SamplerOptions{-1, 0, 1, 0, true, false}), xlaunch::UsageError);
}

}  // namespace

namespace {

Shards uneven_shards(int64_t n, int world, bool shuffle, int64_t offset = 0) {
  Shards out;
  for (int r = 0; r < world; ++r) {
    SamplerOptions o{n, r, world, 42, shuffle, false};
    o.even_batches = false;
    out.push_back(xlaunch::shard_indices(o, 0, offset));
  }
  return out;
}

// even_batches false (Accelerate's even_batches=False): the same strided positions as PyTorch's
// layout, without the padding: the first n mod world ranks hold one sample more.
TEST(Sampler, EvenBatchesFalsePadsNothing) {
  EXPECT_EQ(uneven_shards(10, 3, false), (Shards{{0, 3, 6, 9}, {1, 4, 7}, {2, 5, 8}}));
  // The shuffled order is PyTorch's (above: {2,8,0,7},{6,4,9,2},{1,5,3,6} with padding 2 and 6).
  EXPECT_EQ(uneven_shards(10, 3, true), (Shards{{2, 8, 0, 7}, {6, 4, 9}, {1, 5, 3}}));
  EXPECT_EQ(uneven_shards(2, 3, false), (Shards{{0}, {1}, {}}));
  EXPECT_EQ(uneven_shards(10, 3, false, 4), (Shards{{4, 7}, {5, 8}, {6, 9}}));
  EXPECT_EQ(uneven_shards(10, 3, false, 5), (Shards{{5, 8}, {6, 9}, {7}}));
  SamplerOptions o{10, 2, 3, 0, false, false};
  o.even_batches = false;
  xlaunch::DistributedSampler s(o);
  EXPECT_EQ(s.shard_size(), 3);
  EXPECT_EQ(s.padding(), 0);
  EXPECT_EQ(s.real_positions(), 10);
  o.drop_last = true;  // already even: the cut wins
  EXPECT_EQ(xlaunch::shard_indices(o, 0), (std::vector<int64_t>{2, 5, 8}));
}

// Every sample exactly once over the ranks, for a grid of sizes, worlds and offsets.
TEST(Sampler, EvenBatchesFalseReadsEachRemainingSampleOnce) {
  for (int64_t n : {0, 1, 7, 64, 1001})
    for (int world : {1, 2, 3, 8})
      for (int64_t offset : {int64_t{0}, n / 3, n}) {
        std::vector<int> seen(static_cast<size_t>(n), 0);
        for (const auto& shard : uneven_shards(n, world, true, offset)) {
          for (int64_t i : shard) ++seen[static_cast<size_t>(i)];
        }
        int64_t total = 0;
        for (int c : seen) {
          EXPECT_LE(c, 1);
          total += c;
        }
        EXPECT_EQ(total, n - offset) << "n " << n << " world " << world << " offset " << offset;
      }
}

}  // namespace
