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
// Two pieces:
//  - SharedPool: a first-fit allocator over one mapped region (a shared-memory segment). Its
//    blocks are ordinary CPU DataPtrs and may outlive the pool's owner: the region is released
//    when the owner has closed the pool and its last block is freed.
//  - GradCapture: while one is alive on a thread, CPU allocations on that thread whose byte size is
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
#include <functional>
#include <map>
#include <memory>
#include <vector>

namespace xlaunch {

class SharedPool {
 public:
  // Hands [base, base + bytes) to a new pool; release(base, bytes) runs once the pool is closed
  // and its last block freed. The pool is owned by the caller until close().
  static SharedPool* create(char* base, size_t bytes, std::function<void(char*, size_t)> release);
  // The owner lets go: live blocks stay valid, and the region is released with the last of them.
  void close();

  // A block of n bytes (64-byte aligned), or an empty DataPtr when the pool has no room.
  c10::DataPtr allocate(size_t n);
  // Whether [p, p + n) lies inside this pool's region.
  bool contains(const void* p, size_t n) const;
  size_t in_use() const;  // bytes in live blocks

 private:
  SharedPool(char* base, size_t bytes, std::function<void(char*, size_t)> release);
  friend struct SharedPoolRegistry;
  char* base_;
  size_t bytes_;
  std::function<void(char*, size_t)> release_;
  std::vector<std::pair<size_t, size_t>> free_;  // (offset, size), sorted by offset, coalesced
  std::map<size_t, size_t> live_;                // offset -> size of each block handed out
  size_t live_bytes_ = 0;
  bool closed_ = false;
};

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
