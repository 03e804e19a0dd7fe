// Private to the environment pool: how its threads wake each other. A waiter reads seq() before
// it checks the shared state it waits for, and then wait()s for a ring after that; whoever changes
// that state ring()s. Waiting spins briefly first (the next request usually comes within
// microseconds: the policy of a small model, or another worker's chunk) and then sleeps on a
// condition variable, so an idle pool costs no core; ring() makes the system call only when
// someone sleeps.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace xlaunch::rl::detail {

class Doorbell {
 public:
  using Clock = std::chrono::steady_clock;

  uint64_t seq() const { return seq_.load(std::memory_order_seq_cst); }

  // Sequentially consistent with the sleeper's count: either the sleeper sees the new seq before it
  // sleeps, or ring() sees the sleeper and notifies under the mutex (no lost wake-up).
  void ring() {
    seq_.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      std::lock_guard<std::mutex> lk(mu_);
      cv_.notify_all();
    }
  }

  // Returns once seq() differs from `seen` (true), or at `deadline` (false); Clock::time_point::max():
  // no deadline.
  bool wait(uint64_t seen, Clock::time_point deadline);

 private:
  alignas(64) std::atomic<uint64_t> seq_{0};
  alignas(64) std::atomic<int> sleepers_{0};
  std::mutex mu_;
  std::condition_variable cv_;
};

}  // namespace xlaunch::rl::detail
