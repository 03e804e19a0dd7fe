#include <gtest/gtest.h>

#include "ddp/bucket_plan.h"

using xlaunch::assign_buckets;
using xlaunch::BucketCaps;
using xlaunch::BucketParam;
using Buckets = std::vector<std::vector<size_t>>;

namespace {
std::vector<BucketParam> floats(std::vector<int64_t> bytes) {
  std::vector<BucketParam> out;
  for (auto b : bytes) out.push_back({b, "float@cpu"});
  return out;
}
}  // namespace

TEST(BucketPlan, ReverseOrderWithSmallFirstBucket) {
  // Registration order 0..5; backward sees 5 first. First cap 100, then 250.
  const auto b = assign_buckets(floats({40, 200, 60, 60, 30, 80}), BucketCaps{100, 250});
  EXPECT_EQ(b, (Buckets{{5, 4}, {3, 2, 1}, {0}}));
}

TEST(BucketPlan, LargeParameterGetsItsOwnBucket) {
  const auto b = assign_buckets(floats({10, 1000, 10, 10}), BucketCaps{15, 50});
  EXPECT_EQ(b, (Buckets{{3, 2}, {1}, {0}}));
}

TEST(BucketPlan, EverythingFitsInOneBucket) {
  const auto b = assign_buckets(floats({4, 4, 4}), BucketCaps{1 << 20, 25 << 20});
  EXPECT_EQ(b, (Buckets{{2, 1, 0}}));
}

TEST(BucketPlan, DtypesNeverShareABucket) {
  std::vector<BucketParam> p = {{8, "float@cpu"}, {8, "double@cpu"}, {8, "float@cpu"}, {8, "double@cpu"}};
  const auto b = assign_buckets(p, BucketCaps{16, 16});
  EXPECT_EQ(b, (Buckets{{3, 1}, {2, 0}}));
}

TEST(BucketPlan, PartialBucketsFollowBackwardOrder) {
  std::vector<BucketParam> p = {{8, "double@cpu"}, {8, "float@cpu"}, {8, "double@cpu"}, {8, "float@cpu"}};
  const auto b = assign_buckets(p, BucketCaps{100, 100});
  EXPECT_EQ(b, (Buckets{{3, 1}, {2, 0}}));
}

TEST(BucketPlan, Empty) { EXPECT_TRUE(assign_buckets({}, BucketCaps{}).empty()); }
