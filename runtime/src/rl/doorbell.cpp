#include "rl/doorbell.h"

#include <thread>

namespace xlaunch::rl::detail {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// The spin: a few hundred pauses (a ring from a thread running on another core arrives in well
// under a microsecond), then yields for up to kYieldFor, which let a runnable thread (a worker that
// has the work this one waits for, on a machine with fewer cores than threads) have the core.
constexpr int kPauses = 256;
constexpr auto kYieldFor = std::chrono::microseconds(40);

}  // namespace

bool Doorbell::wait(uint64_t seen, Clock::time_point deadline) {
  for (int i = 0; i < kPauses; ++i) {
    if (seq_.load(std::memory_order_acquire) != seen) return true;
    cpu_relax();
  }
  const Clock::time_point yield_until = std::min(deadline, Clock::now() + kYieldFor);
  while (Clock::now() < yield_until) {
    if (seq_.load(std::memory_order_acquire) != seen) return true;
    std::this_thread::yield();
  }
  std::unique_lock<std::mutex> lk(mu_);
  sleepers_.fetch_add(1, std::memory_order_seq_cst);
  const auto rung = [&] { return seq_.load(std::memory_order_seq_cst) != seen; };
  bool ok = true;
  if (deadline == Clock::time_point::max())
    cv_.wait(lk, rung);
  else
    ok = cv_.wait_until(lk, deadline, rung);
  sleepers_.fetch_sub(1, std::memory_order_seq_cst);
  return ok;
}

}  // namespace xlaunch::rl::detail
