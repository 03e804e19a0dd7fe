// A barrier that lives in shared memory, for the ranks of one machine: a generation counter that
// the last rank to arrive advances. Waiters spin briefly (the others are usually close), then
// sleep on a futex, so a waiting rank gives its core back to whoever still computes.
#pragma once

#include <atomic>
#include <cstdint>

namespace xlaunch {

struct ShmBarrier {
  std::atomic<uint32_t> arrived{0};
  std::atomic<uint32_t> generation{0};

  // Returns once `world` ranks have arrived at this generation.
  void arrive_and_wait(uint32_t world);
};

}  // namespace xlaunch
