// The shared-memory allreduce's reduction kernels against their references, for every op, world
// size and length around the vector width (tails, empty ranges), in float and double.
#include <gtest/gtest.h>

#include <vector>

#include "xlaunch/kernels/cpu_reduce.h"

namespace xk = xlaunch::kernels;

namespace {

// Integer-valued, different on every rank and element: sums and halves are exact.
template <typename T>
std::vector<std::vector<T>> copies(int world, int64_t n) {
  std::vector<std::vector<T>> c(world, std::vector<T>(n));
  for (int r = 0; r < world; ++r)
    for (int64_t i = 0; i < n; ++i) c[r][i] = static_cast<T>(((r * 37 + i * 11) % 201) - 100);
  return c;
}

template <typename T>
std::vector<T*> pointers(std::vector<std::vector<T>>& c) {
  std::vector<T*> p;
  for (auto& v : c) p.push_back(v.data());
  return p;
}

template <typename T, typename Kernel>
void check_against_reference(Kernel kernel) {
  for (int world : {2, 3, 4})
    for (auto op : {xk::ReduceKind::Sum, xk::ReduceKind::Avg, xk::ReduceKind::Max})
      for (int64_t n : {0, 1, 3, 4, 7, 8, 9, 31, 1000}) {
        auto got = copies<T>(world, n), want = copies<T>(world, n);
        kernel(pointers(got).data(), world, n, op);
        xk::reduce_copies_reference(pointers(want).data(), world, n, op);
        for (int r = 0; r < world; ++r)
          ASSERT_EQ(got[r], want[r]) << "world " << world << " op " << static_cast<int>(op) << " n " << n << " rank " << r;
      }
}

TEST(CpuReduce, FloatMatchesReference) { check_against_reference<float>(xk::reduce_copies_float); }
TEST(CpuReduce, DoubleMatchesReference) { check_against_reference<double>(xk::reduce_copies_double); }

template <typename T, typename Kernel>
void check_into_against_reference(Kernel kernel) {
  for (int count : {1, 2, 3, 4})
    for (auto op : {xk::ReduceKind::Sum, xk::ReduceKind::Avg, xk::ReduceKind::Max})
      for (int64_t n : {0, 1, 3, 4, 7, 8, 9, 31, 1000}) {
        auto src = copies<T>(count, n);
        const auto before = src;
        std::vector<const T*> p;
        for (auto& v : src) p.push_back(v.data());
        std::vector<T> got(n, T(-7)), want(n, T(-7));
        kernel(p.data(), count, got.data(), n, op);
        xk::reduce_into_reference(p.data(), count, want.data(), n, op);
        ASSERT_EQ(got, want) << "count " << count << " op " << static_cast<int>(op) << " n " << n;
        ASSERT_EQ(src, before) << "the sources are left as they were";
        // In place: the destination is the first source.
        kernel(p.data(), count, src[0].data(), n, op);
        ASSERT_EQ(src[0], want) << "in place, count " << count << " op " << static_cast<int>(op) << " n " << n;
      }
}

TEST(CpuReduce, IntoFloatMatchesReference) { check_into_against_reference<float>(xk::reduce_into_float); }
TEST(CpuReduce, IntoDoubleMatchesReference) { check_into_against_reference<double>(xk::reduce_into_double); }

TEST(CpuReduce, IntoReferenceKnowsTheAnswer) {
  std::vector<float> a{1, -2, 8}, b{3, 6, -4}, c{5, 2, 2}, out(3);
  const float* p[] = {a.data(), b.data(), c.data()};
  xk::reduce_into_reference(p, 3, out.data(), 3, xk::ReduceKind::Sum);
  EXPECT_EQ(out, (std::vector<float>{9, 6, 6}));
  xk::reduce_into_reference(p, 3, out.data(), 3, xk::ReduceKind::Max);
  EXPECT_EQ(out, (std::vector<float>{5, 6, 8}));
  EXPECT_EQ(a, (std::vector<float>{1, -2, 8}));
}

TEST(CpuReduce, ReferenceKnowsTheAnswer) {
  std::vector<std::vector<float>> c = {{1, -2, 8}, {3, 6, -4}, {5, 2, 2}};
  auto p = pointers(c);
  xk::reduce_copies_reference(p.data(), 3, 3, xk::ReduceKind::Avg);
  for (const auto& v : c) EXPECT_EQ(v, (std::vector<float>{3, 2, 2}));
  std::vector<std::vector<double>> m = {{1, 9}, {4, -9}};
  auto q = pointers(m);
  xk::reduce_copies_reference(q.data(), 2, 2, xk::ReduceKind::Max);
  for (const auto& v : m) EXPECT_EQ(v, (std::vector<double>{4, 9}));
}

}  // namespace
