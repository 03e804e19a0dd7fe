#include "xlaunch/status/step_stats.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <new>
#include <type_traits>

#include "xlaunch/status/seqlock.h"
#include "xlaunch/status/private_files.h"

namespace xlaunch::status {
namespace {

static_assert(std::is_standard_layout_v<profile::RankStats>, "read_stats_file copies the layout by offsets");
static_assert(profile::kStatsV2Bytes + sizeof(profile::RankStats::gpu_bus_id) == profile::kStatsV3Bytes,
              "format 3 is format 2 and the bus id, nothing else");
static_assert(profile::kStatsV3Bytes + sizeof(profile::ZeroStats) == sizeof(profile::RankStats),
              "format 4 is format 3 and the ZeRO figures, nothing else");

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
  // Format 4, else the formats of older runtimes: the same layout cut short (the file's size says which).
  struct Format {
    size_t bytes;
    uint64_t magic;
  };
  const Format formats[] = {{sizeof(profile::RankStats), profile::kStatsMagic},
                            {profile::kStatsV3Bytes, profile::kStatsMagicV3},
                            {profile::kStatsV2Bytes, profile::kStatsMagicV2}};
  size_t bytes = 0;
  uint64_t magic = 0;
  const void* p = nullptr;
  for (const Format& f : formats) {
    bytes = f.bytes, magic = f.magic;
    if ((p = files::map_own_file(path_of(dir, rank), bytes))) break;
  }
  if (!p) return std::nullopt;
  const auto* live = static_cast<const profile::RankStats*>(p);
  // Member by member up to what the file holds (a format 3 file ends where zero begins, 2 at gpu_bus_id).
  std::optional<profile::RankStats> out = read_seqlocked(*live, [&](profile::RankStats& o) {
    std::memcpy(reinterpret_cast<char*>(&o) + offsetof(profile::RankStats, start_ns),
                static_cast<const char*>(p) + offsetof(profile::RankStats, start_ns),
                bytes - offsetof(profile::RankStats, start_ns));
    o.magic = live->magic;
    o.rank = live->rank, o.world = live->world, o.pid = live->pid, o.local_rank = live->local_rank;
    std::memcpy(o.host, live->host, sizeof o.host);
  });
  munmap(const_cast<void*>(p), bytes);
  if (out && (out->magic != magic || out->rank != rank)) out.reset();
  if (out) out->gpu_bus_id[sizeof out->gpu_bus_id - 1] = '\0';
  return out;
}

void set_gpu_bus_id(profile::RankStats* stats, const std::string& bus_id) {
  const std::string id = normalize_pci_bus_id(bus_id);
  if (id.empty()) return;
  write_seqlocked(*stats, [&] { copy_text(stats->gpu_bus_id, sizeof stats->gpu_bus_id, id); });
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
