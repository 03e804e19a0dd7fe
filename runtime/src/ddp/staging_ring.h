// Where ZeRO stage 2 copies a bucket's gradients for its reduce-scatter (reducer.h): one buffer per
// communicator and dtype, used as a ring. A bucket takes the next region that fits; regions are
// given back oldest first, as their reduce-scatters complete in launch order. So the gradients in
// flight need at most the ring, not a buffer per bucket. The planning alone, tested literally.
#pragma once

#include <cstdint>
#include <deque>
#include <utility>

namespace xlaunch {

class StagingRing {
 public:
  explicit StagingRing(int64_t capacity) : capacity_(capacity) {}
  int64_t capacity() const { return capacity_; }
  // The offset of `n` (> 0) free elements, taken now; -1 when the oldest regions must be given back first
  // (and on an empty ring when n > capacity: a caller's error).
  int64_t take(int64_t n);
  // Gives back the oldest region taken; false when none is taken.
  bool give_back_oldest();
  bool empty() const { return live_.empty(); }

 private:
  int64_t capacity_;
  std::deque<std::pair<int64_t, int64_t>> live_;  // [begin, end), oldest first
};

}  // namespace xlaunch
