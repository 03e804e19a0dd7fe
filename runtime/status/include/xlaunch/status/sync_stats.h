// The host-device synchronisations a rank's training loop makes, per optimizer step
// (docs/performance.md#host-device-syncs): a file `syncs-<rank>` in the status directory, made
// only by a rank that counts them (debug: true on a GPU: runtime/src/profile/sync_count.h), mapped
// by it and updated at the end of every optimizer step (a few stores into shared memory), read by
// `xlaunch run` for its report (launcher/src/observe/syncs.h). A file of its own beside stats-<rank>
// (step_stats.h) rather than a fifth stats format: it exists only while debugging, and readers of
// the stats formats stay as they are. The layout is the profile's (namespace profile); the file's
// name, its writer and its reader are the status library's (namespace status, at the end).
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "xlaunch/status/step_stats.h"  // kRingSteps, kWarmupSteps: the same steps as the stats

namespace xlaunch::profile {

// "xlsyncs2": version 2 counts the runtime's own syncs apart (the runtime_ fields).
inline constexpr uint64_t kSyncStatsMagic = 0x3273636e'79736c78ull;

// Where one synchronising call came from: the operator and the caller (sync_count.h's
// describe_sync_site), and the optimizer step it happened in (1-based: the step in progress, so a
// sync before the first step ended is in step 1). step 0: none recorded.
struct SyncSite {
  uint64_t step = 0;
  char where[504] = {};
  std::string text() const { return std::string(where, strnlen(where, sizeof where)); }
};

struct SyncStats {
  SyncStats() = default;
  // A copy (the launcher's snapshot): the sequence lock's value, not the lock.
  SyncStats(const SyncStats& o) { *this = o; }
  SyncStats& operator=(const SyncStats& o) {
    if (this == &o) return *this;
    magic = o.magic;
    rank = o.rank;
    version.store(o.version.load(std::memory_order_relaxed), std::memory_order_relaxed);
    steps = o.steps, syncs = o.syncs, syncs_at_warmup = o.syncs_at_warmup;
    std::memcpy(per_step, o.per_step, sizeof per_step);
    first = o.first;
    first_after_warmup = o.first_after_warmup;
    runtime_syncs = o.runtime_syncs, runtime_syncs_at_warmup = o.runtime_syncs_at_warmup;
    runtime_what = o.runtime_what;
    std::memcpy(runtime_per_step, o.runtime_per_step, sizeof runtime_per_step);
    return *this;
  }

  uint64_t magic = 0;
  int32_t rank = 0;
  int32_t reserved = 0;               // explicit padding: the file's layout has no hidden bytes
  std::atomic<uint64_t> version{0};   // odd while the rank updates what follows (a sequence lock)
  uint64_t steps = 0;                 // optimizer steps ended while counting (those of stats-<rank>)
  uint64_t syncs = 0;                 // synchronising calls of the training thread in those steps,
                                      // the runtime's own (below) not among them
  uint64_t syncs_at_warmup = 0;       // `syncs` when step kWarmupSteps ended
  uint32_t per_step[kRingSteps] = {}; // step i (from 0) at per_step[i % kRingSteps]
  SyncSite first;                     // the run's first synchronising call
  SyncSite first_after_warmup;        // the first in a step after step kWarmupSteps
  // The syncs the runtime itself makes, where it must (fp16 loss scaling's inf/NaN check, ...:
  // sync_count.h's RuntimeSync), counted as the training loop's are above and never among them.
  uint64_t runtime_syncs = 0;
  uint64_t runtime_syncs_at_warmup = 0;
  // step: the step of the runtime's first; where: what each kind is (RuntimeSync's `what`), in the
  // order first seen, joined by "; " (cut at the buffer's end).
  SyncSite runtime_what;
  uint32_t runtime_per_step[kRingSteps] = {};
};

}  // namespace xlaunch::profile

namespace xlaunch::status {

// Creates dir/syncs-<rank> (new, mode 0600: private_files.h's map_new_file), sized for one
// SyncStats and mapped shared read-write, and constructs an empty SyncStats in it with its magic
// and rank set: the rank's counts, updated in place and never unmapped. nullptr when it cannot,
// with *why and errno the cause (ENOENT: this machine does not see dir).
profile::SyncStats* create_sync_stats_file(const std::string& dir, int rank, std::string* why);

// Rank `rank`'s sync counts in dir, copied consistently (a copy made while the rank wrote is taken
// again), when dir is a private directory of this user's and the file a regular file this user owns
// that holds that rank's counts; nullopt otherwise (no such file: the rank did not count).
std::optional<profile::SyncStats> read_sync_stats_file(const std::string& dir, int rank);

}  // namespace xlaunch::status
