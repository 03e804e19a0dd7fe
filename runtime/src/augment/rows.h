// How the CPU kernels of the augmentations spread a batch's rows over threads, and how they are
// compiled for this CPU.
#pragma once

#include <ATen/Parallel.h>

#include <cstdint>

namespace xlaunch::augment::detail {

// True on a loader worker thread (data/epoch_run.cpp sets it): the workers already run batches
// side by side, so each augments its batch on its own thread alone, as PyTorch's DataLoader
// workers run with one intra-op thread, instead of every worker starting a team of intra-op
// threads on the same cores.
inline thread_local bool rows_on_this_thread_only = false;

// fn(begin, end) over [0, n): split over LibTorch's intra-op threads (at::parallel_for with this
// grain), or in one call on a loader worker.
template <typename F>
void parallel_rows(int64_t n, int64_t grain, const F& fn) {
  if (rows_on_this_thread_only) {
    if (n > 0) fn(0, n);
    return;
  }
  at::parallel_for(0, n, grain, fn);
}

}  // namespace xlaunch::augment::detail

// A kernel's entry compiled twice on x86-64: for AVX2 (eight floats a vector instead of four) and
// for the baseline, the loader picking the one this CPU runs (GCC's and Clang's target_clones).
// flatten inlines every step into each clone, so each is compiled for its target. Only AVX2 is
// enabled, not FMA, and the kernels' files are compiled with -ffp-contract=off (colour.cmake,
// geometric.cmake): a fused multiply-add would round otherwise than Kornia, and otherwise than
// the other clone.
#if defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones) && __has_attribute(flatten)
#define XLAUNCH_AUGMENT_CLONES __attribute__((target_clones("avx2", "default"), flatten))
#endif
#endif
#ifndef XLAUNCH_AUGMENT_CLONES
#define XLAUNCH_AUGMENT_CLONES
#endif
