// A record that its writer (a rank) updates in place in a shared mapping, and that readers (the
// launcher) copy, under a sequence lock: `version` is odd while a write is in progress, and moves
// on each write (step_stats.h, sync_stats.h).
#pragma once

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

namespace xlaunch::status {

// Runs write(), which updates the members the lock guards, with `live`'s version odd meanwhile
// and even again after it: a reader's copy taken across it is discarded.
template <typename T, typename Write>
void write_seqlocked(T& live, Write write) {
  live.version.fetch_add(1, std::memory_order_relaxed);  // odd: being written
  std::atomic_thread_fence(std::memory_order_release);   // ... before any of write()'s stores
  write();
  live.version.fetch_add(1, std::memory_order_release);  // even: consistent
}

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

// `text` into a fixed char field of such a record: cut to size - 1 bytes, the rest zeros (so the
// field is always terminated, and no earlier text shows through).
inline void copy_text(char* field, size_t size, const std::string& text) {
  std::memset(field, 0, size);
  std::memcpy(field, text.data(), std::min(text.size(), size - 1));
}

}  // namespace xlaunch::status
