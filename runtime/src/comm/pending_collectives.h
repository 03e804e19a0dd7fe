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
#include <vector>

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

// The events a device communicator records, reused instead of created and destroyed for every
// collective (two each: its inputs ready on the compute stream, its end on the communicator's),
// as PyTorch's ProcessGroupNCCL keeps a cache of them. acquire() gives an event no one else holds:
// one given back, or a new one. It comes back to the pool when its last holder drops it (the
// pending list, the Work handle), on whatever thread that is; an event dropped after the pool is
// gone is destroyed. Re-recording an event is safe for the waits already queued on it: a stream
// waits for the record that preceded the wait. A template over the event, as PendingCollectives.
template <typename Event>
class EventPool : public std::enable_shared_from_this<EventPool<Event>> {
 public:
  // The pool keeps at most this many idle events; more given back at once are destroyed.
  static constexpr size_t kMaxIdle = 256;

  std::shared_ptr<Event> acquire() {
    std::unique_ptr<Event> event;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (!idle_.empty()) {
        event = std::move(idle_.back());
        idle_.pop_back();
      } else {
        ++made_;
      }
    }
    if (!event) event = std::make_unique<Event>();
    std::weak_ptr<EventPool> pool = this->weak_from_this();
    return std::shared_ptr<Event>(event.release(), [pool](Event* e) {
      if (const auto p = pool.lock()) p->give_back(std::unique_ptr<Event>(e));
      else delete e;
    });
  }
  // Events made so far, and idle now.
  size_t made() const {
    std::lock_guard<std::mutex> lk(mu_);
    return made_;
  }
  size_t idle() const {
    std::lock_guard<std::mutex> lk(mu_);
    return idle_.size();
  }

 private:
  void give_back(std::unique_ptr<Event> e) {
    std::lock_guard<std::mutex> lk(mu_);
    if (idle_.size() < kMaxIdle) idle_.push_back(std::move(e));
  }

  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Event>> idle_;
  size_t made_ = 0;
};

}  // namespace xlaunch
