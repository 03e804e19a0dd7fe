// In-place reduction of one range held by every rank of a machine: the core of the shared-memory
// allreduce (runtime/src/comm/shm_communicator.h).
//
// ptrs[r] points to rank r's copy of the same n elements (each rank's memory, mapped by this
// process). After the call every copy holds the reduction over all copies: the sum, the mean or
// the maximum. Two ranks summing or averaging is one pass that reads both copies once and writes
// the result to both; more ranks accumulate into ptrs[0], then copy it to the others.
//
// reduce_copies_* are vectorised (GCC vector extensions, an AVX2 clone picked at load time):
// memory-bound, but -O2's scalar loop runs at half the speed. reduce_copies_reference is the plain
// loop they are tested against.
//
// reduce_into_* is the same reduction written to a separate destination, leaving the copies as they
// are: the first step of the hierarchical allreduce (runtime/src/comm/hierarchical_communicator.h),
// where the ranks of a machine reduce their copies into one staging buffer that crosses the network.
//
// No LibTorch here: raw pointers and element counts.
#pragma once

#include <cstdint>

namespace xlaunch::kernels {

enum class ReduceKind { Sum, Avg, Max };

void reduce_copies_float(float* const* ptrs, int world, int64_t n, ReduceKind op);
void reduce_copies_double(double* const* ptrs, int world, int64_t n, ReduceKind op);

// out[i] = the reduction of srcs[0][i] .. srcs[count-1][i] (count >= 1; Avg divides by count). out
// may be srcs[0] or srcs[1], never a later source: the first pass writes out before srcs[2] on are
// read.
void reduce_into_float(const float* const* srcs, int count, float* out, int64_t n, ReduceKind op);
void reduce_into_double(const double* const* srcs, int count, double* out, int64_t n, ReduceKind op);

// The reference: element by element, in the same order of operations as the kernels above.
template <typename T>
void reduce_copies_reference(T* const* ptrs, int world, int64_t n, ReduceKind op) {
  for (int64_t i = 0; i < n; ++i) {
    T acc = ptrs[0][i];
    for (int r = 1; r < world; ++r) acc = op == ReduceKind::Max ? (ptrs[r][i] > acc ? ptrs[r][i] : acc) : acc + ptrs[r][i];
    if (op == ReduceKind::Avg) acc = world == 2 ? acc * T(0.5) : acc * (T(1) / T(world));
    for (int r = 0; r < world; ++r) ptrs[r][i] = acc;
  }
}

template <typename T>
void reduce_into_reference(const T* const* srcs, int count, T* out, int64_t n, ReduceKind op) {
  for (int64_t i = 0; i < n; ++i) {
    T acc = srcs[0][i];
    for (int r = 1; r < count; ++r) acc = op == ReduceKind::Max ? (srcs[r][i] > acc ? srcs[r][i] : acc) : acc + srcs[r][i];
    if (op == ReduceKind::Avg) acc = count == 2 ? acc * T(0.5) : acc * (T(1) / T(count));
    out[i] = acc;
  }
}

}  // namespace xlaunch::kernels
