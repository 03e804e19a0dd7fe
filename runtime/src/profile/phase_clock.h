// The device clock's bookkeeping (device_clock.h), apart from CUDA: a phase records an event where
// it begins and where it ends; collect() adds the elapsed time of the pairs whose end event has
// completed, oldest first, and reuses their events. At most kMaxPending pairs wait: a device that
// far behind goes untimed until it catches up.
//
// Every device call may fail, and every failure is tolerated: the phase goes untimed (or the pair
// is dropped), and Event::clear_error() runs, so no error is left as the thread's last CUDA error
// for the next kernel-launch check elsewhere to throw. "Not ready" is such an error in CUDA's
// runtime, and is cleared the same way.
//
// Event: movable, with `void record(int device)` (on the device's current stream), `bool query()`
// (completed; false: not yet), `float elapsed_ms(const Event& end)`, and `static void
// clear_error()`; each may throw std::exception.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <utility>
#include <vector>

#include "xlaunch/status/step_stats.h"

namespace xlaunch::profile {

template <typename Event>
class PhaseClock {
 public:
  static constexpr size_t kMaxPending = 1024;

  // -1: nothing is recorded. Forgets what was pending.
  void set_device(int index) {
    device_ = index;
    open_ = false;
    pending_.clear();
    free_.clear();
  }
  size_t pending() const { return pending_.size(); }

  void begin(Phase p, uint64_t host_start_ns) {
    if (open_) {
      if (current_.phase == p) ++depth_;
      return;
    }
    if (device_ < 0 || pending_.size() >= kMaxPending) return;
    Pair pr{p, host_start_ns, take(), take()};
    if (!tolerate([&] { pr.start.record(device_); })) {  // this phase goes untimed
      give_back(pr);
      return;
    }
    current_ = std::move(pr);
    open_ = true;
    depth_ = 0;
  }

  void end(Phase p) {
    if (!open_ || current_.phase != p) return;
    if (depth_ > 0) {
      --depth_;
      return;
    }
    open_ = false;
    if (tolerate([&] { current_.end.record(device_); })) pending_.push_back(std::move(current_));
    else give_back(current_);
  }

  // Calls done(phase, host_start_ns, device_ns) for every completed pair, oldest first.
  template <typename F>
  void collect(F&& done) {
    while (!pending_.empty()) {
      Pair& pr = pending_.front();
      bool complete = false;
      // A query that throws (a device error, not "not ready") drops the pair, untimed.
      const bool queried = tolerate([&] { complete = pr.end.query(); });
      if (queried && !complete) {
        Event::clear_error();  // "not ready": an error to CUDA's runtime, none to us
        break;
      }
      float ms = 0;
      if (queried && tolerate([&] { ms = pr.start.elapsed_ms(pr.end); }))
        done(pr.phase, pr.host_start_ns, static_cast<uint64_t>(static_cast<double>(ms) * 1e6));
      give_back(pr);
      pending_.pop_front();
    }
  }

 private:
  struct Pair {
    Phase phase = kOther;
    uint64_t host_start_ns = 0;
    Event start, end;
  };

  template <typename F>
  static bool tolerate(F&& call) {
    try {
      call();
      return true;
    } catch (const std::exception&) {
    }
    Event::clear_error();
    return false;
  }

  Event take() {
    if (free_.empty()) return Event();
    Event ev = std::move(free_.back());
    free_.pop_back();
    return ev;
  }
  void give_back(Pair& pr) {
    free_.push_back(std::move(pr.start));
    free_.push_back(std::move(pr.end));
  }

  int device_ = -1;
  bool open_ = false;  // a phase is being recorded
  int depth_ = 0;      // phases of its kind nested in it (the outermost one is timed)
  Pair current_;
  std::deque<Pair> pending_;
  std::vector<Event> free_;
};

}  // namespace xlaunch::profile
