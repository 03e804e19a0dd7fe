// Gradients born in shared memory: the zero-copy half of the shared-memory gradient allreduce.
//
// Why: autograd allocates every fresh gradient itself (a parameter's .grad is reset to none by
// zero_grad between steps). On the shared-memory path each of those gradients would then have to
// be copied into a bucket the other ranks can read, before it is reduced: a full extra pass over
// the gradients, as costly on a memory-bound CPU as the reduction itself. Instead, while a prepared
// model's backward runs, allocations of exactly a parameter's gradient size are served from a pool
// of memory the other ranks have mapped; the allreduce then reads and writes the gradients where
// autograd put them.
//
// The pools are SharedPools (shared_pool.h). GradCapture: while one is alive on a thread, CPU allocations on that thread whose byte size is
//    one of its sizes are tried on its pools first; every other allocation (other sizes, other
//    threads, a full pool) goes to the CPU allocator that was installed before. The wrapper is
//    installed as the process's CPU allocator by the first GradCapture; allocations outside a
//    capture cost one thread-local read.
// A gradient that does not land in a pool (a full pool, a gradient made outside a capture) is
// copied into its bucket as before, so this is an optimisation with no change in results.
#pragma once

#include <c10/core/Allocator.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <vector>

#include "comm/shared_pool.h"

namespace xlaunch {

class GradCapture {
 public:
  // Makes this thread's allocations of one of `sizes` bytes try `pools` (in order) until
  // destroyed. Several may be alive (one per prepared model); the newest is asked first. Destroy
  // them in any order, on the creating thread (elsewhere it merely stops capturing).
  GradCapture(std::vector<size_t> sizes, std::vector<SharedPool*> pools);
  ~GradCapture();
  GradCapture(const GradCapture&) = delete;
  GradCapture& operator=(const GradCapture&) = delete;

  // Whether the capturing allocator is the process's CPU allocator (it is not when another
  // library installed one with a higher priority; captures then change nothing).
  static bool active();

  struct State {
    std::vector<size_t> sizes;  // sorted
    std::vector<SharedPool*> pools;
    std::atomic<bool> alive{true};
    c10::DataPtr try_allocate(size_t n) const;
  };

 private:
  std::shared_ptr<State> state_;
};

}  // namespace xlaunch
