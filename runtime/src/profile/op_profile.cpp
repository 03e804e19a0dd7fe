#include "profile/op_profile.h"

#include <torch/csrc/autograd/profiler_kineto.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <thread>

#if XLAUNCH_HAVE_CUDA
#include "cuda_check.h"
#endif
#include "profile/trace.h"
#include "xlaunch/status/step_stats.h"

namespace xlaunch::profile::ops {
namespace {

namespace kp = torch::profiler::impl;
namespace ap = torch::autograd::profiler;

struct State {
  Settings settings;
  std::thread::id owner;  // the thread that steps: the profiler's state is its thread's
  int64_t steps = 0;      // optimizer steps this process has ended
  bool running = false;
};

State& state() {
  static State s;
  return s;
}

// What torch.profiler.profile(activities=..., record_shapes=...) asks LibTorch for: Kineto, on the
// CPU and, on a GPU rank, CUDA (CUPTI, built into libtorch's Kineto).
kp::ProfilerConfig config(const Settings& s) { return kp::ProfilerConfig(kp::ProfilerState::KINETO, s.record_shapes); }

std::set<kp::ActivityType> activities(const Settings& s) {
  std::set<kp::ActivityType> a{kp::ActivityType::CPU};
  if (s.cuda) a.insert(kp::ActivityType::CUDA);
  return a;
}

std::string shapes_text(c10::ArrayRef<std::vector<int64_t>> shapes) {  // as Python prints a list of lists
  std::string out = "[";
  for (size_t i = 0; i < shapes.size(); ++i) {
    out += i ? ", [" : "[";
    for (size_t k = 0; k < shapes[i].size(); ++k) out += (k ? ", " : "") + std::to_string(shapes[i][k]);
    out += "]";
  }
  return out + "]";
}

std::vector<Event> events_of(const ap::ProfilerResult& result, bool record_shapes) {
  std::vector<Event> out;
  out.reserve(result.events().size());
  for (const ap::KinetoEvent& k : result.events()) {
    if (k.isHiddenEvent()) continue;
    Event e;
    e.name = k.name();
    e.start_ns = static_cast<int64_t>(k.startNs());
    e.end_ns = static_cast<int64_t>(k.endNs());
    e.thread = k.startThreadId();
    e.on_device = k.deviceType() != c10::DeviceType::CPU;
    e.async = k.isAsync() || k.startThreadId() != k.endThreadId();
    e.correlation = k.correlationId();
    e.linked_correlation = k.linkedCorrelationId();
    if (record_shapes) e.shapes = shapes_text(k.shapes());
    out.push_back(std::move(e));
  }
  return out;
}

// The operator calls on the timeline's clock, one track per thread in the order they first ran one.
// Kineto's times are CLOCK_REALTIME (c10's ApproximateClock converts its ticks to Unix time).
void add_spans(const Profile& p, status::OpTable& t) {
  std::map<uint64_t, int> track;
  for (const Event& e : p.cpu_events) {
    auto [it, added] = track.emplace(e.thread, status::kOpThread0 + static_cast<int>(track.size()));
    if (added)
      t.threads.emplace_back(it->second, it->second == status::kOpThread0
                                             ? std::string("operators (LibTorch profiler)")
                                             : "operators, thread " + std::to_string(it->second - status::kOpThread0));
    t.spans.push_back({it->second, e.name, trace::part_ns(e.start_ns), e.end_ns - e.start_ns, e.shapes});
  }
}

void publish(const Settings& s, int64_t steps, const ap::ProfilerResult& result) {
  Profile p = aggregate(events_of(result, s.record_shapes), s.record_shapes, s.cuda);
  status::OpTable t;
  t.rank = s.rank;
  t.first_step = kWarmupSteps + 1;
  t.steps = steps;
  t.requested_steps = s.steps;
  t.cuda = s.cuda;
  t.record_shapes = s.record_shapes;
  t.self_cpu_total_ns = p.self_cpu_total_ns;
  t.self_cuda_total_ns = p.device_total_ns;
  if (p.rows.size() > s.max_rows) p.rows.resize(s.max_rows);
  t.rows = std::move(p.rows);
  if (trace::enabled()) add_spans(p, t);
  // Without the status directory (a process started by hand, a machine that does not see it) the
  // table goes to stderr: the only place left where someone sees it.
  std::string why = "no status directory (not started by xlaunch run)";
  if (!s.dir.empty() && status::write_op_table(s.dir, t, &why)) return;
  std::fprintf(stderr, "xlaunch: rank %d's operator table is printed here, not published for xlaunch run: %s\n%s", s.rank,
               why.c_str(), status::format_op_table(t, status::kPrintedOpRows).c_str());
}

void finish_at_exit() { finish(); }

void start(State& st) {
  try {
    ap::prepareProfiler(config(st.settings), activities(st.settings));
    ap::enableProfiler(config(st.settings), activities(st.settings));
    st.running = true;
    // After the profiler's start: what it set up is torn down after this runs.
    static const bool at_exit = std::atexit(finish_at_exit) == 0;
    if (!at_exit)
      std::fprintf(stderr, "xlaunch: warning: rank %d: no exit handler for the operator profile: a process that exits "
                           "without destroying its Accelerator before step %lld publishes no table\n",
                   st.settings.rank, static_cast<long long>(kWarmupSteps + st.settings.steps));
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "xlaunch: warning: rank %d: LibTorch's profiler did not start, so no operator table (profile_ops): %s\n",
                 st.settings.rank, e.what_without_backtrace());
    detail::armed = false;
  }
}

void stop(State& st) {
  detail::armed = false;
  st.running = false;
#if XLAUNCH_HAVE_CUDA
  // The last steps' kernels end on the device first: as torch.profiler does on leaving its `with`.
  // A failed sync (a run ending on a CUDA error) still stops the profiler, below; the error comes
  // back from the run's next CUDA call.
  if (st.settings.cuda) {
    try {
      XLAUNCH_CHECK_CUDA(cudaDeviceSynchronize());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "xlaunch: warning: rank %d: the device did not finish before the operator profile stopped, "
                           "so its last kernels may be missing: %s\n", st.settings.rank, e.what());
    }
  }
#endif
  std::unique_ptr<ap::ProfilerResult> result;
  try {
    result = ap::disableProfiler();
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "xlaunch: warning: rank %d: LibTorch's profiler failed to stop, so no operator table (profile_ops): %s\n",
                 st.settings.rank, e.what_without_backtrace());
    return;
  }
  const int64_t profiled = st.steps - kWarmupSteps;  // N, or fewer when the rank ended first
  if (result && profiled > 0) publish(st.settings, profiled, *result);
}

}  // namespace

void arm(const Settings& s) {
  State& st = state();
  if (s.steps <= 0 || detail::armed || st.running) return;
  st.settings = s;
  st.steps = 0;
  detail::armed = true;
}

void step_done() {
  State& st = state();
  if (st.steps == 0) st.owner = std::this_thread::get_id();
  else if (st.owner != std::this_thread::get_id()) return;  // another thread trains too (in-process ranks): not ours
  ++st.steps;
  if (st.steps == kWarmupSteps) start(st);
  else if (st.running && st.steps == kWarmupSteps + st.settings.steps) stop(st);
}

void finish() noexcept {
  State& st = state();
  if (!st.running || st.owner != std::this_thread::get_id()) return;
  try {
    stop(st);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "xlaunch: warning: rank %d: the operator profile, stopped at the end of the run, is not published: %s\n",
                 st.settings.rank, e.what());
  }
}

}  // namespace xlaunch::profile::ops
