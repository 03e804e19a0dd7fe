#include "xlaunch/status/step_stats.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <new>
#include <type_traits>

#include "xlaunch/status/private_files.h"

namespace xlaunch::status {
namespace {

static_assert(std::is_standard_layout_v<profile::RankStats>, "read_stats_file copies the layout by offsets");
static_assert(profile::kStatsV2Bytes + sizeof(profile::RankStats::gpu_bus_id) == sizeof(profile::RankStats),
              "format 3 is format 2 and the bus id, nothing else");

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
  // Format 3, else the format 2 of an older runtime: the same layout without gpu_bus_id.
  size_t bytes = sizeof(profile::RankStats);
  uint64_t magic = profile::kStatsMagic;
  const void* p = files::map_own_file(path_of(dir, rank), bytes);
  if (!p) {
    bytes = profile::kStatsV2Bytes;
    magic = profile::kStatsMagicV2;
    p = files::map_own_file(path_of(dir, rank), bytes);
  }
  if (!p) return std::nullopt;
  const auto* live = static_cast<const profile::RankStats*>(p);
  std::optional<profile::RankStats> out;
  for (int attempt = 0; attempt < 100 && !out; ++attempt) {
    const uint64_t v0 = live->version.load(std::memory_order_acquire);
    if (v0 % 2 == 1) {
      usleep(100);
      continue;
    }
    out.emplace();
    // Member by member up to what the file holds (a format 2 file ends where gpu_bus_id begins).
    std::memcpy(reinterpret_cast<char*>(&*out) + offsetof(profile::RankStats, start_ns),
                static_cast<const char*>(p) + offsetof(profile::RankStats, start_ns),
                bytes - offsetof(profile::RankStats, start_ns));
    out->magic = live->magic;
    out->rank = live->rank, out->world = live->world, out->pid = live->pid, out->local_rank = live->local_rank;
    std::memcpy(out->host, live->host, sizeof out->host);
    // Checked below: a copy made while the rank wrote is taken again.
    std::atomic_thread_fence(std::memory_order_acquire);
    if (live->version.load(std::memory_order_relaxed) != v0) out.reset();
    else out->version.store(v0, std::memory_order_relaxed);
  }
  munmap(const_cast<void*>(p), bytes);
  if (out && (out->magic != magic || out->rank != rank)) out.reset();
  if (out) out->gpu_bus_id[sizeof out->gpu_bus_id - 1] = '\0';
  return out;
}

void set_gpu_bus_id(profile::RankStats* stats, const std::string& bus_id) {
  const std::string id = normalize_pci_bus_id(bus_id);
  if (id.empty()) return;
  stats->version.fetch_add(1, std::memory_order_relaxed);  // odd: being written
  std::atomic_thread_fence(std::memory_order_release);
  std::memset(stats->gpu_bus_id, 0, sizeof stats->gpu_bus_id);
  std::memcpy(stats->gpu_bus_id, id.data(), std::min(id.size(), sizeof stats->gpu_bus_id - 1));
  stats->version.fetch_add(1, std::memory_order_release);  // even: consistent
}

std::string normalize_pci_bus_id(const std::string& id) {
  unsigned domain = 0, bus = 0, device = 0, function = 0;
  int used = 0;
  const char* s = id.c_str();
  // domain:bus:device.function, or bus:device.function; hex digits only, nothing after.
  const bool full = std::sscanf(s, "%8x:%2x:%2x.%1x%n", &domain, &bus, &device, &function, &used) == 4 &&
                    static_cast<size_t>(used) == id.size();
  if (!full) {
    domain = 0, used = 0;
    if (std::sscanf(s, "%2x:%2x.%1x%n", &bus, &device, &function, &used) != 3 || static_cast<size_t>(used) != id.size())
      return "";
  }
  if (id.find_first_of(" +-xX") != std::string::npos || bus > 0xff || device > 0x1f || function > 7) return "";
  char out[32];
  std::snprintf(out, sizeof out, "%08X:%02X:%02X.%X", domain, bus, device, function);
  return out;
}

}  // namespace xlaunch::status
