// The reducer's control element: how ranks agree on one flag (stop for preemption) with no
// collective of its own. It is one element at the end of the last gradient bucket, belonging to no
// parameter, which the bucket's communication hook averages with the gradients. Each rank writes
// its bit (1 or 0) there before a synced backward starts that bucket; the average is > 0 iff some
// rank wrote 1.
//
// Reading the average:
//  - On the host it is read at the end of the synced backward that carried it.
//  - On a device, reading it there would stall the host on that backward's allreduce. Instead the
//    end of the backward copies it non_blocking into pinned memory and records an event behind the
//    copy; the end of the next synced backward waits for that event (a step old: it has long
//    completed, so this does not stall) and reads the copy.
// Every rank runs the same synced backwards, so every rank reads a raised flag at the same count.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <cstdint>
#include <memory>

namespace c10 {
struct Event;
}

namespace xlaunch {

class ControlWord {
 public:
  // element: the 1-element tensor the hook averages. deferred: read a synced backward late, through
  // a copy (as a device element must be; a host element only in the tests of that rule).
  ControlWord(at::Tensor element, bool deferred);
  ~ControlWord();
  ControlWord(const ControlWord&) = delete;
  ControlWord& operator=(const ControlWord&) = delete;

  // This rank's bit for the synced backwards that follow. Any thread.
  void set_bit(bool on) { bit_.store(on); }
  // Before the bucket starts in a synced backward (on the stream the bucket's collective follows).
  void write();
  // After the synced backward's collectives completed (their waits done); `sync_steps` counts it.
  void read(int64_t sync_steps);
  // The `sync_steps` of the read that first found the average > 0, or -1.
  int64_t raised_at() const { return raised_at_; }

 private:
  at::Tensor element_;
  bool deferred_;
  std::atomic<bool> bit_{false};
  at::Tensor copy_;                  // deferred: the last average, pinned when from a device
  std::unique_ptr<c10::Event> copied_;  // device: recorded behind the copy into copy_
  bool copy_pending_ = false;        // copy_ holds an average not yet read
  int64_t raised_at_ = -1;
};

}  // namespace xlaunch
