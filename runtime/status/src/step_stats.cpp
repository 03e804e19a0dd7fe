#include "xlaunch/status/step_stats.h"

#include <sys/mman.h>
#include <unistd.h>

#include <new>

#include "xlaunch/status/private_files.h"

namespace xlaunch::status {
namespace {

std::string path_of(const std::string& dir, int rank) { return dir + "/stats-" + std::to_string(rank); }

}  // namespace

profile::RankStats* create_stats_file(const std::string& dir, int rank, std::string* why) {
  void* p = files::map_new_file(path_of(dir, rank), sizeof(profile::RankStats), why);
  return p ? new (p) profile::RankStats{} : nullptr;
}

std::optional<profile::RankStats> read_stats_file(const std::string& dir, int rank) {
  std::string why;
  const int dirfd = files::open_private_dir(dir, &why);
  if (dirfd < 0) return std::nullopt;
  close(dirfd);
  const void* p = files::map_own_file(path_of(dir, rank), sizeof(profile::RankStats));
  if (!p) return std::nullopt;
  const auto* live = static_cast<const profile::RankStats*>(p);
  std::optional<profile::RankStats> out;
  for (int attempt = 0; attempt < 100 && !out; ++attempt) {
    const uint64_t v0 = live->version.load(std::memory_order_acquire);
    if (v0 % 2 == 1) {
      usleep(100);
      continue;
    }
    out.emplace(*live);  // checked below: a copy made while the rank wrote is taken again
    std::atomic_thread_fence(std::memory_order_acquire);
    if (live->version.load(std::memory_order_relaxed) != v0) out.reset();
  }
  munmap(const_cast<void*>(p), sizeof(profile::RankStats));
  if (out && (out->magic != profile::kStatsMagic || out->rank != rank)) out.reset();
  return out;
}

}  // namespace xlaunch::status
