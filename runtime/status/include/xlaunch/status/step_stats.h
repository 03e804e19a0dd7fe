// What each rank publishes about its steps, for `xlaunch run`'s utilization report and --monitor
// (docs/performance.md): a file `stats-<rank>` in the status directory, mapped by the rank and
// updated at the end of every optimizer step (a few stores into shared memory; no system call),
// read by the launcher (status_dir.h). The layout is the profile's (namespace profile); the file's
// name, its writer and its reader are the status library's (namespace status, at the end).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

namespace xlaunch::profile {

// Where a step's wall time goes. `other` is the rest of the loop: the step's wall time minus the
// phases measured.
enum Phase : int { kDataWait, kForward, kBackward, kCommWait, kOptimizer, kOther, kPhases };
inline constexpr const char* kPhaseNames[kPhases] = {"data_wait", "forward", "backward", "comm_wait", "optimizer", "other"};

inline constexpr uint64_t kStatsMagic = 0x34737461'74736c78ull;    // "xlstats4"
// The formats before: 3 without `zero`, 2 without `gpu_bus_id` either (read_stats_file still reads
// them, with those left empty, so a program built against an older runtime keeps its report).
inline constexpr uint64_t kStatsMagicV3 = 0x33737461'74736c78ull;  // "xlstats3"
inline constexpr uint64_t kStatsMagicV2 = 0x32737461'74736c78ull;  // "xlstats2"
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

// Sharded data parallelism (ZeRO, docs/memory.md): what the prepared optimizers move and keep. All
// zero at ddp.zero_stage 0. The bytes are this rank's, summed over `steps` optimizer steps (those
// that ended the report's step: see step_clock.h's zero_step).
struct ZeroStats {
  int32_t stage = 0;
  int32_t reserved = 0;  // explicit padding: the file's layout has no hidden bytes
  uint64_t steps = 0;
  uint64_t reduce_scattered_bytes = 0;  // by the synced backwards (stage 2; 0 at stage 1: allreduced)
  uint64_t gathered_bytes = 0;          // by the allgathers after the steps not skipped
  uint64_t optimizer_state_bytes = 0;   // every prepared optimizer's, counted after its first step
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
    std::memcpy(gpu_bus_id, o.gpu_bus_id, sizeof gpu_bus_id);
    zero = o.zero;
    return *this;
  }

  // The GPU's PCI bus id as published (NVML's form, status::normalize_pci_bus_id); empty on CPUs.
  std::string bus_id() const { return std::string(gpu_bus_id, strnlen(gpu_bus_id, sizeof gpu_bus_id)); }

  uint64_t magic = 0;
  int32_t rank = 0, world = 1, pid = 0, local_rank = 0;
  char host[64] = {};
  std::atomic<uint64_t> version{0};  // odd while the rank updates what follows (a sequence lock)
  uint64_t start_ns = 0;             // CLOCK_REALTIME when the first step began
  Totals total;                      // every step
  Totals at_warmup;                  // `total` when step kWarmupSteps ended
  StepRecord ring[kRingSteps];       // step i (from 0) at ring[i % kRingSteps]
  // Added in format 3, last so that what comes before is format 2's layout. The PCI bus id of the
  // GPU this rank trains on, "00000000:BB:DD.F" (NVML's form), so that the launcher finds it among
  // NVML's GPUs whatever CUDA_VISIBLE_DEVICES, gpu_ids and CUDA's device order did; with `host`, it
  // names the GPU across machines. Empty on a CPU rank.
  char gpu_bus_id[32] = {};
  // Added in format 4, last so that what comes before is format 3's layout.
  ZeroStats zero;
};

// How large files of the older formats are: format 4 without zero (3), and without gpu_bus_id (2).
inline constexpr size_t kStatsV3Bytes = offsetof(RankStats, zero);
inline constexpr size_t kStatsV2Bytes = offsetof(RankStats, gpu_bus_id);

}  // namespace xlaunch::profile

namespace xlaunch::status {

// Creates dir/stats-<rank> (new, mode 0600: private_files.h's map_new_file), sized for one
// RankStats and mapped shared read-write, and constructs an empty RankStats in it: the rank's
// stats, updated in place and never unmapped. nullptr when it cannot, with *why and errno the
// cause (ENOENT: this machine does not see dir).
profile::RankStats* create_stats_file(const std::string& dir, int rank, std::string* why);

// Rank `rank`'s stats file in dir, copied consistently (its sequence lock: a copy made while the
// rank wrote is taken again), when dir is a private directory of this user's and the file a
// regular file this user owns that holds that rank's stats; nullopt otherwise. Files of formats 3
// and 2 (an older runtime's) are read too, with an empty `zero` (and gpu_bus_id for 2).
std::optional<profile::RankStats> read_stats_file(const std::string& dir, int rank);

// Publishes the rank's GPU (its PCI bus id, any form normalize_pci_bus_id takes) in its stats,
// under the sequence lock. Empty or unparsable: nothing is published.
void set_gpu_bus_id(profile::RankStats* stats, const std::string& bus_id);

// A PCI bus id in NVML's form, "00000000:BB:DD.F" (domain of 8 hex digits, upper case), from
// CUDA's "0000:bb:dd.f" (cudaDeviceGetPCIBusId), NVML's own, or lspci's "bb:dd.f" (domain 0).
// Empty when `id` is not domain:bus:device.function in hex (bus <= ff, device <= 1f, function <= 7).
std::string normalize_pci_bus_id(const std::string& id);

}  // namespace xlaunch::status
