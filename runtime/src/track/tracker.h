// The tracker: what acc.log hands over goes into a queue, and a thread of its own writes it to
// every backend (backends.h), so that the training loop never waits for the disk. Made on the
// main process only (the Accelerator's init_trackers).
//
// Bounded everywhere: the queue holds at most Limits::max_pending records (beyond that a record
// is dropped, counted, and said once); end() waits at most Limits::end_timeout_s for the thread
// to write what is queued, then says what it gave up (how many records, for which backends, after
// how long). A backend whose write fails (WriteError: a full disk, a removed directory) is stopped
// with one warning naming it, its path and the reason; the others go on, and so does training.
// Non-finite values are written as they are (each backend's way); the first is said with its
// name and step, and end() says how many there were.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "track/backend.h"

namespace xlaunch::track {

struct Limits {
  size_t max_pending = 1 << 16;  // records queued and not written yet
  double end_timeout_s = 60;     // how long end() waits for the queue to be written
};

struct TrackerCounts {
  uint64_t records = 0;      // scalar records and histograms accepted by log()/histogram()
  uint64_t written = 0;      // records every live backend has written
  uint64_t dropped = 0;      // refused because the queue was full
  uint64_t non_finite = 0;   // NaN or infinite values among the scalars accepted
};

class Tracker {
 public:
  // Starts the writer thread. Nothing is written until the first record (then begin(start) on
  // every backend, first).
  Tracker(std::vector<std::unique_ptr<Backend>> backends, RunStart start, Limits limits = {});
  ~Tracker();  // end()
  Tracker(const Tracker&) = delete;
  Tracker& operator=(const Tracker&) = delete;

  // Queues one record of `values` at `step`, stamped with the wall time now. Calls every live
  // backend's admit() first (which may throw UsageError; nothing is queued then). Never waits for
  // the writer thread beyond a mutex held for a queue operation.
  void log(int64_t step, const std::vector<Scalar>& values);
  void histogram(int64_t step, Histogram h);
  // This process resumed from `checkpoint` and logs from `first_step` on: the backends' next
  // begin() carries them (at once, in queue order, if records were written already).
  void resume(int64_t first_step, const std::string& checkpoint);
  // Waits until what was queued so far is written and flushed (at most timeout_s, then says what it
  // left waiting): before a checkpoint, so that the logs reach the step it saves. True if drained.
  bool drain(double timeout_s);
  // Writes what is queued, flushes, stops the thread (bounded: Limits::end_timeout_s). Idempotent.
  void end();

  TrackerCounts counts() const;
  // The names of the backends still writing.
  std::vector<std::string> live_backends() const;

 private:
  // The queue, the backends and the counts, shared with the writer thread: when end() gives up on
  // a thread stuck in a write, it detaches it, and the thread still holds them (and frees them)
  // whenever the write returns, after the Tracker is gone.
  struct State;
  std::shared_ptr<State> state_;
  std::thread thread_;
};

}  // namespace xlaunch::track
