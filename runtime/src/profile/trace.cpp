#include "profile/trace.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <vector>

#include "private_files.h"
#include "profile/json.h"
#include "profile/step_clock.h"

namespace xlaunch::profile::trace {
namespace {

struct Event {
  int tid;
  const char* name;
  uint64_t start_ns, dur_ns;  // monotonic
  std::string args;
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

void span(int tid, const char* name, uint64_t start_mono_ns, uint64_t dur_ns, const std::string& args) {
  Trace& t = trace();
  std::lock_guard<std::mutex> lk(t.mu);
  t.events.push_back({tid, name, start_mono_ns, dur_ns, args});
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
  const int r = t.settings.rank;
  std::string out = "[\n";
  char buf[160];
  for (const auto& [tid, name] : t.thread_names) {
    std::snprintf(buf, sizeof buf, "{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_name\",\"args\":{\"name\":", r, tid);
    out += buf + json_string(name) + "}},\n";
  }
  // Microseconds since the job's epoch (small numbers: exact in a double, so spans nest exactly).
  out += "{\"xlaunch_epoch_ns\":" + std::to_string(t.settings.epoch_ns) + "}\n";
  const int64_t shift = t.mono_to_real_ns + t.settings.clock_offset_ns - t.settings.epoch_ns;
  for (const Event& e : t.events) {
    const double ts_us = static_cast<double>(static_cast<int64_t>(e.start_ns) + shift) / 1000.0;
    std::snprintf(buf, sizeof buf, "{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"name\":", r, e.tid,
                  ts_us, static_cast<double>(e.dur_ns) / 1000.0);
    out += buf + json_string(e.name) + (e.args.empty() ? "" : ",\"args\":" + e.args) + "},\n";
  }
  out += "{}\n]\n";  // every event line ends with a comma; the empty object closes the list
  std::string why;
  const int dirfd = files::open_private_dir(t.settings.dir, &why);
  if (dirfd < 0 || !files::write_private_file(dirfd, "trace-rank" + std::to_string(r) + ".json", out, &why))
    std::fprintf(stderr, "xlaunch: warning: rank %d's timeline is not written: %s\n", r, why.c_str());
  if (dirfd >= 0) close(dirfd);
}

}  // namespace xlaunch::profile::trace
