// SharedPool: a first-fit allocator over one mapped region (a shared-memory segment that every
// rank of the machine maps), where the gradients of the shared-memory allreduce are born (see
// grad_capture.h for why). Its blocks are ordinary CPU DataPtrs and may outlive the pool's owner:
// the region is released when the owner has closed the pool and its last block is freed.
#pragma once

#include <c10/core/Allocator.h>

#include <cstddef>
#include <functional>
#include <map>
#include <utility>
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

// Returns p's block to the live pool it came from; false when p lies in no live pool (the
// capturing allocator then hands p to the allocator it wraps).
bool free_pool_block(void* p);

}  // namespace xlaunch
