#include "comm/shared_pool.h"

#include <algorithm>
#include <cstdint>
#include <mutex>

#include "check.h"

namespace xlaunch {

namespace {
constexpr size_t kAlign = 64;
size_t round_up(size_t n) { return (std::max<size_t>(n, 1) + kAlign - 1) / kAlign * kAlign; }
}  // namespace

// Every live pool, so a block's deleter (which gets only the pointer) finds its pool, and so a
// closed pool is released by whichever thread frees its last block. One lock for all of it: pool
// traffic is a handful of allocations per parameter per step.
struct SharedPoolRegistry {
  std::mutex mu;
  std::vector<SharedPool*> pools;

  static SharedPoolRegistry& get() {
    static auto* r = new SharedPoolRegistry;  // never destroyed: blocks may be freed at exit
    return *r;
  }
  // With mu held: releases and forgets `pool` if it is closed and empty.
  void reap(SharedPool* pool) {
    if (!pool->closed_ || !pool->live_.empty()) return;
    pools.erase(std::find(pools.begin(), pools.end(), pool));
    pool->release_(pool->base_, pool->bytes_);
    delete pool;
  }
  // The block's deleter: returns it to its pool.
  static void free_block(void* p) { XLAUNCH_ASSERT(try_free(p), "a pool block's deleter got memory of no live pool"); }
  // Returns p's block to its pool; false when p is in no pool.
  static bool try_free(void* p) {
    auto& r = get();
    std::lock_guard<std::mutex> lk(r.mu);
    for (SharedPool* pool : r.pools) {
      if (!pool->contains(p, 1)) continue;
      const size_t offset = static_cast<char*>(p) - pool->base_;
      auto it = pool->live_.find(offset);
      XLAUNCH_ASSERT(it != pool->live_.end(), "a freed pool block was handed out");
      const size_t size = it->second;
      pool->live_.erase(it);
      pool->live_bytes_ -= size;
      // Back into the sorted free list, merged with its neighbours.
      auto& fl = pool->free_;
      auto pos = std::lower_bound(fl.begin(), fl.end(), std::make_pair(offset, size_t{0}));
      pos = fl.insert(pos, {offset, size});
      if (pos + 1 != fl.end() && pos->first + pos->second == (pos + 1)->first) {
        pos->second += (pos + 1)->second;
        fl.erase(pos + 1);
      }
      if (pos != fl.begin() && (pos - 1)->first + (pos - 1)->second == pos->first) {
        (pos - 1)->second += pos->second;
        fl.erase(pos);
      }
      r.reap(pool);
      return true;
    }
    return false;
  }
};

SharedPool::SharedPool(char* base, size_t bytes, std::function<void(char*, size_t)> release)
    : base_(base), bytes_(bytes), release_(std::move(release)) {
  free_.push_back({0, bytes});
}

SharedPool* SharedPool::create(char* base, size_t bytes, std::function<void(char*, size_t)> release) {
  XLAUNCH_ASSERT(reinterpret_cast<uintptr_t>(base) % kAlign == 0, "a pool region is 64-byte aligned");
  auto* pool = new SharedPool(base, bytes, std::move(release));
  auto& r = SharedPoolRegistry::get();
  std::lock_guard<std::mutex> lk(r.mu);
  r.pools.push_back(pool);
  return pool;
}

void SharedPool::close() {
  auto& r = SharedPoolRegistry::get();
  std::lock_guard<std::mutex> lk(r.mu);
  closed_ = true;
  r.reap(this);
}

c10::DataPtr SharedPool::allocate(size_t n) {
  const size_t size = round_up(n);
  auto& r = SharedPoolRegistry::get();
  std::lock_guard<std::mutex> lk(r.mu);
  XLAUNCH_ASSERT(!closed_, "allocate from a closed pool");
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < size) continue;
    const size_t offset = it->first;
    if (it->second == size) free_.erase(it);
    else *it = {offset + size, it->second - size};
    live_.emplace(offset, size);
    live_bytes_ += size;
    char* p = base_ + offset;
    // data == context, so raw_deallocate through the capturing allocator works as well.
    return c10::DataPtr(p, p, &SharedPoolRegistry::free_block, c10::Device(c10::DeviceType::CPU));
  }
  return {};
}

bool SharedPool::contains(const void* p, size_t n) const {
  const char* c = static_cast<const char*>(p);
  return c >= base_ && c + n <= base_ + bytes_;
}

size_t SharedPool::in_use() const {
  auto& r = SharedPoolRegistry::get();
  std::lock_guard<std::mutex> lk(r.mu);
  return live_bytes_;
}

bool free_pool_block(void* p) { return SharedPoolRegistry::try_free(p); }

}  // namespace xlaunch
