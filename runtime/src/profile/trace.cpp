#include "profile/trace.h"

#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <vector>

#include "profile/step_clock.h"
#include "xlaunch/status/trace_part.h"

namespace xlaunch::profile::trace {
namespace {

struct Event {
  int tid;
  const char* name;
  uint64_t start_ns, dur_ns;  // monotonic
  status::TraceArgs args;
};

struct Trace {
  Settings settings;
  std::atomic<bool> active{false};
  bool started = false, written = false;
  int64_t mono_to_real_ns = 0;  // add to a monotonic time to get CLOCK_REALTIME
  std::mutex mu;
  std::vector<Event> events;
  std::map<int, std::string> thread_names{{kTrainThread, "training loop"}, {kCommThread, "communication thread"}, {kCudaStream, "CUDA stream"}};
  std::atomic<int> next_loader{0};
};

Trace& trace() {
  static Trace t;
  return t;
}

}  // namespace

void start(const Settings& s) {
  Trace& t = trace();
  t.settings = s;
  t.started = !s.dir.empty();
  t.mono_to_real_ns = static_cast<int64_t>(realtime_ns()) - static_cast<int64_t>(monotonic_ns());
  if (t.started && kWarmupSteps == 0) t.active.store(true);
}

bool active() { return trace().active.load(std::memory_order_relaxed); }

void set_step(int64_t steps_done) {
  Trace& t = trace();
  if (!t.started) return;
  t.active.store(steps_done >= kWarmupSteps && steps_done < kWarmupSteps + t.settings.steps, std::memory_order_relaxed);
}

void span(int tid, const char* name, uint64_t start_mono_ns, uint64_t dur_ns, status::TraceArgs args) {
  Trace& t = trace();
  std::lock_guard<std::mutex> lk(t.mu);
  t.events.push_back({tid, name, start_mono_ns, dur_ns, std::move(args)});
}

bool enabled() { return trace().started; }

int64_t part_ns(int64_t realtime_ns) {
  const Settings& s = trace().settings;
  return realtime_ns + s.clock_offset_ns - s.epoch_ns;
}

int loader_thread_id() {
  thread_local int id = 0;
  if (id == 0) {
    Trace& t = trace();
    id = kLoaderThread0 + t.next_loader.fetch_add(1);
    std::lock_guard<std::mutex> lk(t.mu);
    t.thread_names[id] = "loader worker " + std::to_string(id - kLoaderThread0);
  }
  return id;
}

void write() {
  Trace& t = trace();
  std::lock_guard<std::mutex> lk(t.mu);
  if (!t.started || t.written) return;
  t.written = true;
  status::TracePart part;
  part.rank = t.settings.rank;
  part.epoch_ns = t.settings.epoch_ns;
  part.threads.assign(t.thread_names.begin(), t.thread_names.end());
  // Nanoseconds since the job's epoch on rank 0's clock: small integers, so spans nest exactly.
  const int64_t shift = t.mono_to_real_ns + t.settings.clock_offset_ns - t.settings.epoch_ns;
  for (const Event& e : t.events)
    part.spans.push_back({e.tid, e.name, static_cast<int64_t>(e.start_ns) + shift, static_cast<int64_t>(e.dur_ns), e.args});
  std::string why;
  if (!status::write_trace_part(t.settings.dir, part, &why))
    std::fprintf(stderr, "xlaunch: warning: rank %d's timeline is not written: %s\n", part.rank, why.c_str());
}

}  // namespace xlaunch::profile::trace
