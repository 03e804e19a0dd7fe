#include "xlaunch/status/sync_stats.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <new>
#include <type_traits>

#include "xlaunch/status/seqlock.h"
#include "xlaunch/status/private_files.h"

namespace xlaunch::status {
namespace {

static_assert(std::is_standard_layout_v<profile::SyncStats>, "read_sync_stats_file copies the layout by offsets");

std::string path_of(const std::string& dir, int rank) { return dir + "/syncs-" + std::to_string(rank); }

}  // namespace

profile::SyncStats* create_sync_stats_file(const std::string& dir, int rank, std::string* why) {
  void* p = files::map_new_file(path_of(dir, rank), sizeof(profile::SyncStats), why);
  if (!p) return nullptr;
  auto* s = new (p) profile::SyncStats{};
  s->rank = rank;
  std::atomic_thread_fence(std::memory_order_release);
  s->magic = profile::kSyncStatsMagic;  // last: a reader takes the file for counts only from here on
  return s;
}

std::optional<profile::SyncStats> read_sync_stats_file(const std::string& dir, int rank) {
  std::string why;
  const int dirfd = files::open_private_dir(dir, &why);
  if (dirfd < 0) return std::nullopt;
  close(dirfd);
  const void* p = files::map_own_file(path_of(dir, rank), sizeof(profile::SyncStats));
  if (!p) return std::nullopt;
  const auto* live = static_cast<const profile::SyncStats*>(p);
  constexpr size_t kBody = offsetof(profile::SyncStats, steps);  // what the sequence lock guards
  std::optional<profile::SyncStats> out = read_seqlocked(*live, [&](profile::SyncStats& o) {
    std::memcpy(reinterpret_cast<char*>(&o) + kBody, static_cast<const char*>(p) + kBody,
                sizeof(profile::SyncStats) - kBody);
    o.magic = live->magic;
    o.rank = live->rank;
  });
  munmap(const_cast<void*>(p), sizeof(profile::SyncStats));
  if (out && (out->magic != profile::kSyncStatsMagic || out->rank != rank)) out.reset();
  if (out) {
    out->first.where[sizeof out->first.where - 1] = '\0';
    out->first_after_warmup.where[sizeof out->first_after_warmup.where - 1] = '\0';
    out->runtime_what.where[sizeof out->runtime_what.where - 1] = '\0';
  }
  return out;
}

}  // namespace xlaunch::status
