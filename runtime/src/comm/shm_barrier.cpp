#include "comm/shm_barrier.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>

namespace xlaunch {
namespace {

void futex_wait(std::atomic<uint32_t>* addr, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), FUTEX_WAIT, expected, nullptr, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>* addr) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace

void ShmBarrier::arrive_and_wait(uint32_t world) {
  const uint32_t gen = generation.load(std::memory_order_acquire);
  if (arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == world) {
    arrived.store(0, std::memory_order_relaxed);
    generation.fetch_add(1, std::memory_order_acq_rel);
    futex_wake_all(&generation);
    return;
  }
  for (int i = 0; i < 2000; ++i) {
    if (generation.load(std::memory_order_acquire) != gen) return;
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
  while (generation.load(std::memory_order_acquire) == gen) futex_wait(&generation, gen);
}

}  // namespace xlaunch
