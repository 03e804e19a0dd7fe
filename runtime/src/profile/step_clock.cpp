#include "profile/step_clock.h"

#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <atomic>
#include <thread>
#include <vector>

#include "profile/device_clock.h"
#include "profile/sync_count.h"
#include "profile/op_profile.h"
#include "profile/trace.h"
#include "xlaunch/status/seqlock.h"

namespace xlaunch::profile {
namespace {

struct Clock {
  bool enabled = false;
  RankStats* stats = nullptr;
  std::atomic<std::thread::id> owner{};      // the training thread: the first to mark a phase
  std::vector<Phase> stack;                  // open phases, innermost last
  uint64_t mark_ns = 0;                      // when the innermost phase was last charged
  uint64_t step_start_ns = 0;                // monotonic; 0 before the first phase
  uint64_t step_start_real_ns = 0;
  uint64_t phase_ns[kPhases] = {};           // this step's, so far
  uint64_t samples = 0;
  std::atomic<uint64_t> collectives{0}, bytes{0};
  ZeroStats zero;                            // what the next step_done publishes
};

Clock& clock() {
  static Clock c;
  return c;
}

uint64_t cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// The rank's stats file in dir, mapped; in this process's memory when there is no directory or it
// fails.
RankStats* map_stats(const std::string& dir, int rank) {
  if (!dir.empty()) {
    std::string why;
    if (RankStats* s = status::create_stats_file(dir, rank, &why)) return s;
    if (errno == ENOENT) return new RankStats{};  // a machine that does not see the status directory
    std::fprintf(stderr, "xlaunch: warning: %s; no utilization report for rank %d\n", why.c_str(), rank);
  }
  return new RankStats{};
}

// Claimed once, atomically: several threads may train (in-process ranks in tests, say); only the
// first to mark a phase is measured, and no other thread touches the clock's state.
bool on_training_thread(Clock& c) {
  const std::thread::id me = std::this_thread::get_id();
  std::thread::id none{};
  return c.owner.compare_exchange_strong(none, me) || none == me;
}

}  // namespace

uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t realtime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void start(const ClockSettings& s) {
  Clock& c = clock();
  c.enabled = s.enabled;
  if (!s.enabled) return;
  c.stats = map_stats(s.dir, s.rank);
  RankStats& st = *c.stats;
  st.rank = s.rank;
  st.world = s.world;
  st.local_rank = s.local_rank;
  st.pid = static_cast<int32_t>(getpid());
  gethostname(st.host, sizeof st.host - 1);
  st.magic = kStatsMagic;  // last: a reader takes the file for stats only from here on
}

PhaseScope::PhaseScope(Phase p) : phase_(p) {
  Clock& c = clock();
  counted_ = c.enabled && on_training_thread(c);
  if (!counted_) return;
  const uint64_t now = monotonic_ns();
  if (c.step_start_ns == 0) {
    c.step_start_ns = now;
    c.step_start_real_ns = realtime_ns();
  }
  if (!c.stack.empty()) c.phase_ns[c.stack.back()] += now - c.mark_ns;
  c.stack.push_back(p);
  c.mark_ns = now;
  start_ns_ = now;
  if (p == kForward || p == kBackward || p == kOptimizer) device::begin(p, now);
}

PhaseScope::~PhaseScope() {
  if (!counted_) return;
  Clock& c = clock();
  if (phase_ == kForward || phase_ == kBackward || phase_ == kOptimizer) device::end(phase_);
  const uint64_t now = monotonic_ns();
  c.phase_ns[phase_] += now - c.mark_ns;
  c.stack.pop_back();
  c.mark_ns = now;
  if (trace::active()) trace::span(trace::kTrainThread, kPhaseNames[phase_], start_ns_, now - start_ns_);
}

void add_samples(uint64_t n) {
  Clock& c = clock();
  if (c.enabled && on_training_thread(c)) c.samples += n;
}

void collective_done(uint64_t bytes) {
  Clock& c = clock();
  if (!c.enabled) return;
  c.collectives.fetch_add(1, std::memory_order_relaxed);
  c.bytes.fetch_add(bytes, std::memory_order_relaxed);
}

void step_done(int64_t step) {
  Clock& c = clock();
  if (!c.enabled || !on_training_thread(c) || c.step_start_ns == 0) {
    if (!c.enabled) syncs::step_done();  // no report: the host-device syncs are counted all the same (debug on a GPU)
    if (ops::armed()) ops::step_done();  // the operator profile (profile_ops): one branch when off
    return;
  }
  const uint64_t now = monotonic_ns();
  if (!c.stack.empty()) {  // a step inside a phase (unusual): charge it so far
    c.phase_ns[c.stack.back()] += now - c.mark_ns;
    c.mark_ns = now;
  }
  const uint64_t wall = now - c.step_start_ns;
  uint64_t measured = 0;
  for (int p = 0; p < kOther; ++p) measured += c.phase_ns[p];
  c.phase_ns[kOther] = wall > measured ? wall - measured : 0;

  RankStats& st = *c.stats;
  status::write_seqlocked(st, [&] {
    Totals& t = st.total;
    if (t.steps == 0) st.start_ns = c.step_start_real_ns;
    StepRecord& r = st.ring[t.steps % kRingSteps];
    r.end_ns = realtime_ns();
    r.samples = c.samples;
    r.cpu_ns = cpu_ns();
    std::memcpy(r.phase_ns, c.phase_ns, sizeof r.phase_ns);
    ++t.steps;
    t.samples += c.samples;
    t.wall_ns += wall;
    t.cpu_ns = r.cpu_ns;
    for (int p = 0; p < kPhases; ++p) t.phase_ns[p] += c.phase_ns[p];
    device::collect(t.gpu_ns);
    t.collectives = c.collectives.load(std::memory_order_relaxed);
    t.bytes = c.bytes.load(std::memory_order_relaxed);
    if (t.steps == static_cast<uint64_t>(kWarmupSteps)) st.at_warmup = t;
    st.zero = c.zero;
  });
  syncs::step_done();  // the host-device syncs of this step, when counted (debug on a GPU)

  if (trace::active()) trace::span(trace::kTrainThread, "step", c.step_start_ns, wall, {{"step", step}});
  trace::set_step(step);
  std::memset(c.phase_ns, 0, sizeof c.phase_ns);
  c.samples = 0;
  // The operator profile starts or stops here, between two steps: stopping it (a device sync, the
  // aggregation, a file written) is in neither this step, published above, nor the next, whose
  // clock starts after it. One branch when off, and then the next step starts at `now`.
  const uint64_t next = ops::armed() ? (ops::step_done(), monotonic_ns()) : now;
  if (!c.stack.empty()) c.mark_ns = next;  // nor in the phase the step ended in
  c.step_start_ns = next;
  c.step_start_real_ns = realtime_ns();
}

void zero_step(int stage, uint64_t reduce_scattered_bytes, uint64_t gathered_bytes) {
  Clock& c = clock();
  if (!c.enabled || !on_training_thread(c)) return;
  c.zero.stage = stage;
  ++c.zero.steps;
  c.zero.reduce_scattered_bytes += reduce_scattered_bytes;
  c.zero.gathered_bytes += gathered_bytes;
}

void zero_state(uint64_t bytes) {
  Clock& c = clock();
  if (c.enabled && on_training_thread(c)) c.zero.optimizer_state_bytes += bytes;
}

void set_gpu_bus_id(const std::string& bus_id) {
  Clock& c = clock();
  if (c.enabled && c.stats) status::set_gpu_bus_id(c.stats, bus_id);
}

bool enabled() { return clock().enabled; }

const RankStats& stats() {
  Clock& c = clock();
  if (!c.stats) c.stats = new RankStats{};
  return *c.stats;
}

}  // namespace xlaunch::profile
