// What each rank publishes about its steps, for `xlaunch run`'s utilization report and --monitor
// (docs/performance.md): a file `stats-<rank>` in the status directory, mapped by the rank and
// updated at the end of every optimizer step (a few stores into shared memory; no system call),
// read by the launcher (status_dir.h). The layout is the profile's (namespace profile); the file's
// name, its writer and its reader are the status library's (namespace status, at the end).
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

namespace xlaunch::profile {

// Where a step's wall time goes. `other` is the rest of the loop: the step's wall time minus the
// phases measured.
enum Phase : int { kDataWait, kForward, kBackward, kCommWait, kOptimizer, kOther, kPhases };
inline constexpr const char* kPhaseNames[kPhases] = {"data_wait", "forward", "backward", "comm_wait", "optimizer", "other"};

inline constexpr uint64_t kStatsMagic = 0x32737461'74736c78ull;  // "xlstats2"
inline constexpr int kRingSteps = 4096;  // the last steps, one record each
inline constexpr int kWarmupSteps = 10;  // left out of the report (first allocations, autotuning)

struct StepRecord {
  uint64_t end_ns = 0;              // CLOCK_REALTIME when the step ended
  uint64_t phase_ns[kPhases] = {};  // they add up to the step's wall time
  uint64_t samples = 0;             // handed over by the prepared loaders in this step
  uint64_t cpu_ns = 0;              // the process's CPU time (all threads) at the end of the step
};

struct Totals {
  uint64_t steps = 0, samples = 0, wall_ns = 0, cpu_ns = 0;
  uint64_t phase_ns[kPhases] = {};
  uint64_t collectives = 0, bytes = 0;  // gradient and other collectives, and the bytes they reduced
  uint64_t gpu_ns[kPhases] = {};        // device time of the phases on CUDA (device_clock.h); 0 on CPUs
};

struct RankStats {
  RankStats() = default;
  // A copy (the launcher's snapshot): the sequence lock's value, not the lock.
  RankStats(const RankStats& o) { *this = o; }
  RankStats& operator=(const RankStats& o) {
    if (this == &o) return *this;
    magic = o.magic;
    rank = o.rank, world = o.world, pid = o.pid, local_rank = o.local_rank;
    std::memcpy(host, o.host, sizeof host);
    version.store(o.version.load(std::memory_order_relaxed), std::memory_order_relaxed);
    start_ns = o.start_ns;
    total = o.total;
    at_warmup = o.at_warmup;
    std::memcpy(ring, o.ring, sizeof ring);
    return *this;
  }

  uint64_t magic = 0;
  int32_t rank = 0, world = 1, pid = 0, local_rank = 0;
  char host[64] = {};
  std::atomic<uint64_t> version{0};  // odd while the rank updates what follows (a sequence lock)
  uint64_t start_ns = 0;             // CLOCK_REALTIME when the first step began
  Totals total;                      // every step
  Totals at_warmup;                  // `total` when step kWarmupSteps ended
  StepRecord ring[kRingSteps];       // step i (from 0) at ring[i % kRingSteps]
};

}  // namespace xlaunch::profile

namespace xlaunch::status {

// Creates dir/stats-<rank> (new, mode 0600: private_files.h's map_new_file), sized for one
// RankStats and mapped shared read-write, and constructs an empty RankStats in it: the rank's
// stats, updated in place and never unmapped. nullptr when it cannot, with *why and errno the
// cause (ENOENT: this machine does not see dir).
profile::RankStats* create_stats_file(const std::string& dir, int rank, std::string* why);

// Rank `rank`'s stats file in dir, copied consistently (its sequence lock: a copy made while the
// rank wrote is taken again), when dir is a private directory of this user's and the file a
// regular file this user owns that holds that rank's stats; nullopt otherwise.
std::optional<profile::RankStats> read_stats_file(const std::string& dir, int rank);

}  // namespace xlaunch::status
