// The collectives a device communicator (NCCL) has queued on its stream and not yet seen finish,
// oldest first, each with the event recorded after it. Released, and logged finished on the
// progress board, as their events complete: by the watchdog's poll, and before each new collective
// is added, so that a job without a watchdog thread (XLAUNCH_TIMEOUT_S=0) holds no growing queue.
// A template over the event (at::cuda::CUDAEvent there; anything with `bool query()`, which may
// throw for a failed device), so the release logic is tested without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <utility>

#include "watch/watchdog.h"

namespace xlaunch {

template <typename Event>
class PendingCollectives {
 public:
  // Releases what has completed, then adds `seq`, finished when `done` completes.
  void add(uint64_t seq, std::shared_ptr<Event> done) {
    std::lock_guard<std::mutex> lk(mu_);
    release_locked();
    pending_.emplace_back(seq, std::move(done));
  }
  // Logs as finished, and drops, every collective from the oldest on whose event has completed.
  void release_completed() {
    std::lock_guard<std::mutex> lk(mu_);
    release_locked();
  }
  // Collectives still in flight (after the last release). Teardown aborts the communicator instead
  // of destroying it while any are: destroying waits for queued work that may never finish.
  size_t in_flight() const {
    std::lock_guard<std::mutex> lk(mu_);
    return pending_.size();
  }

 private:
  void release_locked() {
    while (!pending_.empty() && pending_.front().second->query()) {
      watch::finished(pending_.front().first, true);
      pending_.pop_front();
    }
  }

  mutable std::mutex mu_;
  std::deque<std::pair<uint64_t, std::shared_ptr<Event>>> pending_;
};

}  // namespace xlaunch
