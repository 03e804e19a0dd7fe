#include "profile/sync_count.h"

#include <c10/util/Backtrace.h>
#if XLAUNCH_HAVE_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <sstream>
#include <vector>

#include "xlaunch/status/seqlock.h"

namespace xlaunch::profile::syncs {
namespace {

struct Frame {
  std::string symbol, offset, module;  // "<unknown function>" when not exported; module: its path
};

// "frame #3: at::_ops::item::call(at::Tensor const&) + 0x9c (0x7f12 in /x/libtorch_cpu.so)"
bool parse_frame(const std::string& line, Frame* f) {
  const size_t colon = line.find(": ");
  const size_t paren = line.rfind(" (0x");
  const size_t in = line.find(" in ", paren == std::string::npos ? 0 : paren);
  if (line.rfind("frame #", 0) != 0 || colon == std::string::npos || paren == std::string::npos ||
      in == std::string::npos || line.back() != ')')
    return false;
  std::string head = line.substr(colon + 2, paren - colon - 2);
  const size_t plus = head.rfind(" + ");
  f->symbol = plus == std::string::npos ? head : head.substr(0, plus);
  f->offset = plus == std::string::npos ? "" : head.substr(plus + 3);
  f->module = line.substr(in + 4, line.size() - in - 5);
  return true;
}

std::string base_name(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool in_libtorch(const Frame& f) {
  const std::string b = base_name(f.module);
  return b.rfind("libtorch", 0) == 0 || b.rfind("libc10", 0) == 0;
}

// "at::Tensor::item<float>() const" -> "at::Tensor::item<float>": up to the first '(' outside
// template arguments, "(anonymous namespace)" kept.
std::string without_arguments(const std::string& symbol) {
  int depth = 0;
  for (size_t i = 0; i < symbol.size(); ++i) {
    const char c = symbol[i];
    if (c == '<') ++depth;
    if (c == '>') --depth;
    if (c == '(' && depth == 0) {
      if (symbol.compare(i, 21, "(anonymous namespace)") == 0) {
        i += 20;
        continue;
      }
      return symbol.substr(0, i);
    }
  }
  return symbol;
}

bool known(const Frame& f) { return !f.symbol.empty() && f.symbol != "<unknown function>"; }

thread_local const char* t_runtime_sync = nullptr;
thread_local const char* t_thread_role = nullptr;  // CountedThread's

}  // namespace

RuntimeSync::RuntimeSync(const char* what) : outer_(t_runtime_sync) { t_runtime_sync = what; }
RuntimeSync::~RuntimeSync() { t_runtime_sync = outer_; }
const char* runtime_sync() { return t_runtime_sync; }

bool is_sync_warning(const c10::Warning& w) { return w.msg().find(kSyncWarningText) != std::string::npos; }

std::string describe_sync_site(const std::string& backtrace) {
  std::vector<Frame> frames;
  std::istringstream in(backtrace);
  for (std::string line; std::getline(in, line);) {
    Frame f;
    if (parse_frame(line, &f)) frames.push_back(std::move(f));
  }
  // The frames before LibTorch's are this handler's own (c10::warn calls it).
  size_t i = 0;
  while (i < frames.size() && !in_libtorch(frames[i])) ++i;
  if (i == frames.size()) return "";
  std::string op, entry;
  for (; i < frames.size() && in_libtorch(frames[i]); ++i) {
    if (!known(frames[i])) continue;
    const std::string name = without_arguments(frames[i].symbol);
    if (name.rfind("at::_ops::", 0) == 0) op = name;
    entry = name;
  }
  std::string out = !op.empty() ? op : !entry.empty() ? entry : base_name(frames[i - 1].module);
  if (i < frames.size()) {
    const Frame& caller = frames[i];
    out += " called from ";
    out += known(caller) ? without_arguments(caller.symbol) + " (in " + base_name(caller.module) + ")"
                         : base_name(caller.module) + "+" + caller.offset;
  }
  return out;
}

SyncCounter::SyncCounter(SyncStats* stats, c10::WarningHandler* next, bool announce)
    : stats_(stats), next_(next), announce_(announce) {}

void SyncCounter::record(SyncSite& site, const c10::Warning& w, uint64_t step) {
  std::string where = describe_sync_site(c10::get_backtrace(/*frames_to_skip=*/0, /*maximum_number_of_frames=*/64));
  if (where.empty()) {  // no LibTorch frame to name: where the warning was raised
    const c10::SourceLocation& loc = w.source_location();
    where = std::string(loc.function ? loc.function : "?") + " (" + (loc.file ? base_name(loc.file) : "?") + ":" +
            std::to_string(loc.line) + ")";
  }
  if (t_thread_role) where += std::string(" (on ") + t_thread_role + ")";
  status::write_seqlocked(*stats_, [&] {
    site.step = step;
    status::copy_text(site.where, sizeof site.where, where);
  });
  if (announce_ && &site == &stats_->first_after_warmup)
    std::fprintf(stderr,
                 "xlaunch: host-device sync in step %llu (debug: true counts them per step for the report): %s\n",
                 static_cast<unsigned long long>(step), where.c_str());
}

void SyncCounter::note_runtime(const char* what, uint64_t step) {
  SyncSite& kinds = stats_->runtime_what;
  // A kind already noted, or no room for another.
  if (kinds.step != 0 && (std::strstr(kinds.where, what) || strnlen(kinds.where, sizeof kinds.where) == sizeof kinds.where - 1))
    return;
  std::string text = kinds.text();
  if (!text.empty()) text += "; ";
  text += what;
  status::write_seqlocked(*stats_, [&] {
    if (kinds.step == 0) kinds.step = step;
    status::copy_text(kinds.where, sizeof kinds.where, text);
  });
}

void SyncCounter::process(const c10::Warning& w) {
  if (!is_sync_warning(w)) {
    if (next_) next_->process(w);
    return;
  }
  const char* what = runtime_sync();
  (what ? runtime_in_step_ : in_step_).fetch_add(1, std::memory_order_relaxed);
  // Several threads count (CountedThread), and the stats have one writer at a time: the step's end
  // and the records take this lock. (Each sync is a host-device wait of microseconds at least: the
  // lock costs nothing beside it.)
  const std::lock_guard<std::mutex> lock(record_mu_);
  const uint64_t step = stats_->steps + 1;  // the step in progress
  if (what) {
    note_runtime(what, step);
    return;
  }
  if (stats_->first.step == 0) record(stats_->first, w, step);
  if (step > static_cast<uint64_t>(kWarmupSteps) && stats_->first_after_warmup.step == 0)
    record(stats_->first_after_warmup, w, step);
}

CountedThread::CountedThread(const char* role, SyncCounter* counter) : outer_role_(t_thread_role) {
  if (!counter) return;
  guard_.emplace(counter);
  t_thread_role = role;
}

CountedThread::~CountedThread() { t_thread_role = outer_role_; }

void SyncCounter::step_done() {
  const std::lock_guard<std::mutex> lock(record_mu_);
  const uint64_t n = in_step_.exchange(0, std::memory_order_relaxed);
  const uint64_t rn = runtime_in_step_.exchange(0, std::memory_order_relaxed);
  SyncStats& s = *stats_;
  status::write_seqlocked(s, [&] {
    s.per_step[s.steps % kRingSteps] = static_cast<uint32_t>(std::min<uint64_t>(n, UINT32_MAX));
    s.runtime_per_step[s.steps % kRingSteps] = static_cast<uint32_t>(std::min<uint64_t>(rn, UINT32_MAX));
    ++s.steps;
    s.syncs += n;
    s.runtime_syncs += rn;
    if (s.steps == static_cast<uint64_t>(kWarmupSteps)) {
      s.syncs_at_warmup = s.syncs;
      s.runtime_syncs_at_warmup = s.runtime_syncs;
    }
  });
}

namespace {
std::atomic<SyncCounter*> g_counter{nullptr};

SyncStats* map_counts(const std::string& dir, int rank) {
  if (!dir.empty()) {
    std::string why;
    if (SyncStats* s = status::create_sync_stats_file(dir, rank, &why)) return s;
    if (errno != ENOENT)
      std::fprintf(stderr, "xlaunch: warning: %s; rank %d's host-device syncs are not in the report\n", why.c_str(), rank);
  }
  auto* s = new SyncStats{};
  s->rank = rank;
  s->magic = kSyncStatsMagic;
  return s;
}
}  // namespace

SyncCounter* start(const std::string& dir, int rank) {
  static std::once_flag once;
  std::call_once(once, [&] {
    // Leaked on purpose: the handler must outlive every warning of the process, static
    // destructors included.
    auto* c = new SyncCounter(map_counts(dir, rank), c10::WarningUtils::get_warning_handler(), rank == 0);
    c10::WarningUtils::set_warning_handler(c);
#if XLAUNCH_HAVE_CUDA
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_WARN);
#endif
    g_counter.store(c, std::memory_order_release);
  });
  return counter();
}

SyncCounter* counter() { return g_counter.load(std::memory_order_acquire); }

void step_done() {
  if (SyncCounter* c = counter()) c->step_done();
}

}  // namespace xlaunch::profile::syncs
