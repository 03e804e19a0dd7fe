#include "xlaunch/kernels/cpu_reduce.h"

#include <cstring>

namespace xlaunch::kernels {
namespace {

// Everything below is inlined into the target_clones callers at the end, so the 32-byte vectors
// never cross a call in the non-AVX clone: -Wpsabi's ABI note does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"
template <typename T>
struct Vec;
template <>
struct Vec<float> {
  typedef float type __attribute__((vector_size(32)));
};
template <>
struct Vec<double> {
  typedef double type __attribute__((vector_size(32)));
};

// out[i] = f(a[i], b[i]) (and out2[i] too when kBoth), vector by vector, then the tail element-wise.
// out may be a or b: each vector is read before its result is written.
template <bool kBoth, typename T, typename F>
inline __attribute__((always_inline)) void zip(T* out, T* out2, const T* a, const T* b, int64_t n, F f) {
  using V = typename Vec<T>::type;
  constexpr int64_t w = sizeof(V) / sizeof(T);
  int64_t i = 0;
  for (; i + w <= n; i += w) {
    V x, y;
    std::memcpy(&x, a + i, sizeof(V));
    std::memcpy(&y, b + i, sizeof(V));
    const V r = f(x, y);
    std::memcpy(out + i, &r, sizeof(V));
    if (kBoth) std::memcpy(out2 + i, &r, sizeof(V));
  }
  for (; i < n; ++i) {
    const T r = f(a[i], b[i]);
    out[i] = r;
    if (kBoth) out2[i] = r;
  }
}

// out[i] = f(a[i], b[i]).
template <typename T, typename F>
inline __attribute__((always_inline)) void zip_into(T* out, const T* a, const T* b, int64_t n, F f) {
  zip<false>(out, static_cast<T*>(nullptr), a, b, n, f);
}

template <typename T>
inline __attribute__((always_inline)) void reduce_into(const T* const* srcs, int count, T* out, int64_t n,
                                                       ReduceKind op) {
  const auto max = [](auto acc, auto y) { return y > acc ? y : acc; };
  const auto add = [](auto acc, auto y) { return acc + y; };
  if (count == 1) {
    if (out != srcs[0]) std::memmove(out, srcs[0], static_cast<size_t>(n) * sizeof(T));
    return;
  }
  // The first pass reads two sources and writes out; each further source is added into out. The
  // sum of two averaged is one pass (the scale folded in), like reduce_copies.
  if (count == 2 && op == ReduceKind::Avg)
    return zip_into(out, srcs[0], srcs[1], n, [](auto x, auto y) { return (x + y) * T(0.5); });
  if (op == ReduceKind::Max) zip_into(out, srcs[0], srcs[1], n, max);
  else zip_into(out, srcs[0], srcs[1], n, add);
  for (int r = 2; r < count; ++r) {
    if (op == ReduceKind::Max) zip_into(out, out, srcs[r], n, max);
    else zip_into(out, out, srcs[r], n, add);
  }
  if (op == ReduceKind::Avg) {
    const T s = T(1) / T(count);
    zip_into(out, out, out, n, [s](auto x, auto) { return x * s; });
  }
}

template <typename T>
inline __attribute__((always_inline)) void reduce_copies(T* const* ptrs, int world, int64_t n, ReduceKind op) {
  T* first = ptrs[0];
  if (world == 2 && op != ReduceKind::Max) {  // one pass: read both copies once, write both
    const T scale = op == ReduceKind::Avg ? T(0.5) : T(1);
    T* second = ptrs[1];
    return zip<true>(first, second, first, second, n, [scale](auto x, auto y) { return (x + y) * scale; });
  }
  for (int r = 1; r < world; ++r) {
    if (op == ReduceKind::Max) zip_into(first, first, ptrs[r], n, [](auto x, auto y) { return x > y ? x : y; });
    else zip_into(first, first, ptrs[r], n, [](auto x, auto y) { return x + y; });
  }
  if (op == ReduceKind::Avg) {
    const T s = T(1) / T(world);
    zip_into(first, first, first, n, [s](auto x, auto) { return x * s; });
  }
  for (int r = 1; r < world; ++r) std::memcpy(ptrs[r], first, static_cast<size_t>(n) * sizeof(T));
}

}  // namespace

__attribute__((target_clones("avx2", "default"))) void reduce_copies_float(float* const* ptrs, int world, int64_t n,
                                                                            ReduceKind op) {
  reduce_copies<float>(ptrs, world, n, op);
}

__attribute__((target_clones("avx2", "default"))) void reduce_copies_double(double* const* ptrs, int world, int64_t n,
                                                                             ReduceKind op) {
  reduce_copies<double>(ptrs, world, n, op);
}

__attribute__((target_clones("avx2", "default"))) void reduce_into_float(const float* const* srcs, int count,
                                                                          float* out, int64_t n, ReduceKind op) {
  reduce_into<float>(srcs, count, out, n, op);
}

__attribute__((target_clones("avx2", "default"))) void reduce_into_double(const double* const* srcs, int count,
                                                                           double* out, int64_t n, ReduceKind op) {
  reduce_into<double>(srcs, count, out, n, op);
}

}  // namespace xlaunch::kernels
