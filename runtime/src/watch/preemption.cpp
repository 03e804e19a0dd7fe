#include "watch/preemption.h"

#include <signal.h>
#include <time.h>

#include <atomic>

namespace xlaunch::preempt {
namespace {

std::atomic<bool> g_requested{false};
std::atomic<int64_t> g_at_ns{0};

int64_t realtime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);  // async-signal-safe
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void on_signal(int) {
  if (!g_requested.exchange(true)) g_at_ns.store(realtime_ns());
}

}  // namespace

void install_handler() {
  static const bool installed = [] {
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;  // MPI, shared memory and file I/O carry on where they were
    sigaction(kPreemptionSignal, &sa, nullptr);
    return true;
  }();
  (void)installed;
}

bool requested() { return g_requested.load(std::memory_order_relaxed); }
int64_t requested_at_ns() { return g_at_ns.load(); }
void request() { on_signal(kPreemptionSignal); }

}  // namespace xlaunch::preempt
