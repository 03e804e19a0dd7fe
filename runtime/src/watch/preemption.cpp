#include "watch/preemption.h"

#include <pthread.h>
#include <signal.h>

#include <atomic>

#include "watch/board.h"

namespace xlaunch::preempt {
namespace {

std::atomic<bool> g_requested{false};
std::atomic<int64_t> g_at_ns{0};

void on_signal(int) {
  if (!g_requested.exchange(true)) g_at_ns.store(watch::now_ns());  // clock_gettime: async-signal-safe
}

}  // namespace

void install_handler() {
  static const bool installed = [] {
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;  // MPI, shared memory and file I/O carry on where they were
    sigaction(kPreemptionSignal, &sa, nullptr);
    // Inherited blocked (the signal mask survives fork and exec), the handler would never run and
    // the job would train on past its preemption. Threads started from here on inherit this.
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, kPreemptionSignal);
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
    return true;
  }();
  (void)installed;
}

bool requested() { return g_requested.load(std::memory_order_relaxed); }
int64_t requested_at_ns() { return g_at_ns.load(); }

}  // namespace xlaunch::preempt
