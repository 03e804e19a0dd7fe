// ZeRO's layout from literal input: shards padded to the world, the pieces of each rank's shard
// (groups, buckets, segments), stage 2's buckets for large parameters, and the staging ring. The
// training at stages 1 and 2: zero_test.cpp.
#include <gtest/gtest.h>

#include "ddp/bucket_plan.h"
#include "ddp/staging_ring.h"
#include "ddp/zero_layout.h"

using xlaunch::zero::Piece;
using xlaunch::zero::Segment;

TEST(ZeroLayout, ShardsArePaddedToTheWorld) {
  EXPECT_EQ(xlaunch::zero::shard_elements(10, 4), 3);
  EXPECT_EQ(xlaunch::zero::shard_elements(12, 4), 3);
  EXPECT_EQ(xlaunch::zero::shard_elements(0, 3), 0);
  EXPECT_EQ(xlaunch::zero::shard_elements(1, 3), 1);
}

TEST(ZeroLayout, PiecesFollowShardsGroupsAndBuckets) {
  // Bucket 0: params 2 (5 elements), 1 (3); bucket 1: param 0 (4). Params 0 and 2 in group 0, 1 in group 1.
  const std::vector<std::vector<size_t>> buckets{{2, 1}, {0}};
  const std::vector<int64_t> numel{4, 3, 5};
  const std::vector<int> group{0, 1, 0};
  // W = 2: bucket 0 has 8 elements, shards of 4; bucket 1 shards of 2.
  const auto r0 = xlaunch::zero::pieces_of_rank(buckets, numel, group, 2, 0);
  ASSERT_EQ(r0.size(), 2u);
  EXPECT_EQ(r0[0].bucket, 0u);
  EXPECT_EQ(r0[0].offset, 0);
  EXPECT_EQ(r0[0].length, 4);
  EXPECT_EQ(r0[0].group, 0);
  ASSERT_EQ(r0[0].segments.size(), 1u);
  EXPECT_EQ(r0[0].segments[0].param, 2u);
  EXPECT_EQ(r0[1].bucket, 1u);
  EXPECT_EQ(r0[1].offset, 0);
  EXPECT_EQ(r0[1].length, 2);
  const auto r1 = xlaunch::zero::pieces_of_rank(buckets, numel, group, 2, 1);
  ASSERT_EQ(r1.size(), 3u);  // param 2's last element (group 0), param 1 (group 1), param 0's last two
  EXPECT_EQ(r1[0].offset, 4);
  EXPECT_EQ(r1[0].length, 1);
  EXPECT_EQ(r1[0].segments[0].param_offset, 4);
  EXPECT_EQ(r1[1].group, 1);
  EXPECT_EQ(r1[1].offset, 5);
  EXPECT_EQ(r1[1].length, 3);
  EXPECT_EQ(r1[2].bucket, 1u);
  EXPECT_EQ(r1[2].offset, 2);
  EXPECT_EQ(r1[2].segments[0].param_offset, 2);
  // One group: consecutive parameters join one piece with two segments. W = 3: shards of 3.
  const auto one = xlaunch::zero::pieces_of_rank(buckets, numel, {0, 0, 0}, 3, 1);
  ASSERT_EQ(one.size(), 2u);
  EXPECT_EQ(one[0].offset, 3);
  EXPECT_EQ(one[0].length, 3);
  ASSERT_EQ(one[0].segments.size(), 2u);
  EXPECT_EQ(one[0].segments[0].param, 2u);
  EXPECT_EQ(one[0].segments[0].param_offset, 3);
  EXPECT_EQ(one[0].segments[0].length, 2);
  EXPECT_EQ(one[0].segments[1].param, 1u);
  EXPECT_EQ(one[0].segments[1].length, 1);
  // A parameter the optimizer does not hold is in no piece; padding is in none either.
  const auto none = xlaunch::zero::pieces_of_rank(buckets, numel, {-1, -1, 0}, 3, 2);
  EXPECT_TRUE(none.empty());  // rank 2 of bucket 0 holds param 1 and padding; bucket 1's is padding
  // Every element of every held parameter is in exactly one rank's pieces.
  for (int w : {1, 2, 3, 4, 5, 13}) {
    std::vector<int64_t> covered(3, 0);
    for (int r = 0; r < w; ++r)
      for (const Piece& p : xlaunch::zero::pieces_of_rank(buckets, numel, group, w, r)) {
        int64_t sum = 0;
        for (const Segment& s : p.segments) {
          covered[s.param] += s.length;
          sum += s.length;
        }
        EXPECT_EQ(sum, p.length);
      }
    EXPECT_EQ(covered, numel) << "world " << w;
  }
}

TEST(ZeroLayout, LargeParametersGetBucketsOfTheirOwnAtStageTwo) {
  std::vector<xlaunch::BucketParam> params{{400, "f"}, {40, "f"}, {4000, "f"}, {40, "f"}};
  xlaunch::BucketCaps caps{100, 1000, false};
  EXPECT_EQ(xlaunch::assign_buckets(params, caps), (std::vector<std::vector<size_t>>{{3, 2}, {1, 0}}));
  caps.alone_from_cap = true;
  EXPECT_EQ(xlaunch::assign_buckets(params, caps), (std::vector<std::vector<size_t>>{{3}, {2}, {1, 0}}));
}

TEST(StagingRing, TakesInOrderAndWrapsAroundTheOldest) {
  xlaunch::StagingRing ring(10);
  EXPECT_EQ(ring.take(11), -1);
  EXPECT_EQ(ring.take(4), 0);
  EXPECT_EQ(ring.take(4), 4);
  EXPECT_EQ(ring.take(4), -1);  // 2 left at the end, and the start is held
  EXPECT_TRUE(ring.give_back_oldest());
  EXPECT_EQ(ring.take(4), 0);  // wraps: [0, 4) is free again
  EXPECT_EQ(ring.take(1), -1);  // wrapped: free room is [4, 4)
  EXPECT_TRUE(ring.give_back_oldest());
  EXPECT_EQ(ring.take(6), 4);  // [4, 10) free, up to the end
  EXPECT_TRUE(ring.give_back_oldest());
  EXPECT_TRUE(ring.give_back_oldest());
  EXPECT_FALSE(ring.give_back_oldest());
  EXPECT_TRUE(ring.empty());
  EXPECT_EQ(ring.take(10), 0);
}
