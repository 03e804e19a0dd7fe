// Reading a record that its writer updates in place under a sequence lock (step_stats.h,
// sync_stats.h): `version` is odd while a write is in progress, and moves on each write.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <optional>

namespace xlaunch::status {

// A consistent copy of `live`: copy(out) copies the members the lock guards from the mapping, and
// the copy is taken again while a write was in progress or one happened meanwhile (at most 100
// tries, 100 us apart); nullopt when none came. The copy's version is the one it was taken at.
template <typename T, typename Copy>
std::optional<T> read_seqlocked(const T& live, Copy copy) {
  std::optional<T> out;
  for (int attempt = 0; attempt < 100 && !out; ++attempt) {
    const uint64_t v0 = live.version.load(std::memory_order_acquire);
    if (v0 % 2 == 1) {
      usleep(100);
      continue;
    }
    out.emplace();
    copy(*out);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (live.version.load(std::memory_order_relaxed) != v0) out.reset();
    else out->version.store(v0, std::memory_order_relaxed);
  }
  return out;
}

}  // namespace xlaunch::status
