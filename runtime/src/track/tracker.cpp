#include "track/tracker.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>

#include "track/number_text.h"

namespace xlaunch::track {
namespace {

// One fprintf per warning: one whole line, never interleaved with another thread's.
void warn(const std::string& text) { std::fprintf(stderr, "[xlaunch] warning: tracking: %s\n", text.c_str()); }

double now_s() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

std::string list(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "none" : out;
}

// WriteError's text, with errno's text unless it holds it already, and what ENOSPC means.
std::string reason(const WriteError& e) {
  std::string why = e.what();
  const char* text = std::strerror(e.err());
  if (why.find(text) == std::string::npos) why += std::string(": ") + text;
  if (e.err() == ENOSPC) why += " (the disk is full)";
  return why;
}

}  // namespace

struct Tracker::State {
  // One entry of the queue: a record, or a begin() of every backend (before the first record, and
  // at a resume after records), so that begin() runs in the order the training thread asked for it.
  struct Item {
    enum class Kind { Begin, Scalars, Histogram } kind = Kind::Scalars;
    int64_t step = 0;
    double wall_time = 0;
    std::vector<Scalar> values;
    Histogram hist;
    RunStart start;
  };

  State(std::vector<std::unique_ptr<Backend>> b, RunStart s, Limits l)
      : backends(std::move(b)), limits(l), start(std::move(s)), live(backends.size(), true) {
    // Names and paths asked once: messages on the training thread never call into a backend the
    // writer may be stuck in.
    for (const auto& be : backends) {
      names.push_back(be->name());
      wheres.push_back(be->where());
    }
  }

  void run();
  void write(const Item& item);
  void flush_all();
  void call(size_t i, const char* what, const std::function<void(Backend&)>& fn);
  void stop(size_t i, const std::string& why);
  void push(Item item, size_t non_finite, const Scalar* first_non_finite);
  std::vector<std::string> live_names() const;  // under mu

  const std::vector<std::unique_ptr<Backend>> backends;
  std::vector<std::string> names, wheres;
  const Limits limits;

  mutable std::mutex mu;  // everything below but the atomics
  std::condition_variable wake;  // the writer: an item was queued, or end() asks it to stop
  std::condition_variable done;  // end(): the writer has finished
  RunStart start;                // the next begin()'s
  bool begun = false;            // a Begin is queued already: a resume queues another
  std::deque<Item> queue;
  size_t pending = 0;            // records in the queue (Begins are not counted: at most one per resume)
  std::vector<bool> live;        // changed by the writer only
  TrackerCounts counts;
  bool stopping = false, finished = false, warned_full = false;
  bool idle = true;              // the queue is empty and what was written is flushed (drain())
  std::string first_non_finite;  // "train/loss at step 12"
  // Where the writer is, for end()'s message when it gives up: a backend's index (-1: between
  // calls) and the call; and whether end() gave up on it (the writer then writes nothing more).
  std::atomic<int> in_backend{-1};
  std::atomic<const char*> in_call{""};
  std::atomic<bool> abandoned{false};
};

void Tracker::State::run() {
  std::unique_lock<std::mutex> lock(mu);
  for (;;) {
    wake.wait(lock, [&] { return !queue.empty() || stopping; });
    if (abandoned || queue.empty()) break;
    Item item = std::move(queue.front());
    queue.pop_front();
    if (item.kind != Item::Kind::Begin) --pending;
    lock.unlock();
    write(item);
    lock.lock();
    if (item.kind != Item::Kind::Begin) ++counts.written;
    if (queue.empty()) {
      lock.unlock();
      flush_all();
      lock.lock();
      if (queue.empty()) {
        idle = true;
        done.notify_all();
      }
    }
  }
  finished = true;
  done.notify_all();
}

void Tracker::State::write(const Item& item) {
  for (size_t i = 0; i < backends.size(); ++i) {
    switch (item.kind) {
      case Item::Kind::Begin: call(i, "begin()", [&](Backend& b) { b.begin(item.start); }); break;
      case Item::Kind::Scalars:
        call(i, "scalars()", [&](Backend& b) { b.scalars(item.step, item.wall_time, item.values); });
        break;
      case Item::Kind::Histogram:
        call(i, "histogram()", [&](Backend& b) { b.histogram(item.step, item.wall_time, item.hist); });
        break;
    }
  }
}

void Tracker::State::flush_all() {
  for (size_t i = 0; i < backends.size(); ++i) call(i, "flush()", [](Backend& b) { b.flush(); });
}

// Nothing a backend throws leaves the writer thread: it stops that backend, and only that one.
void Tracker::State::call(size_t i, const char* what, const std::function<void(Backend&)>& fn) {
  if (!live[i] || abandoned) return;
  in_call = what;
  in_backend = static_cast<int>(i);
  try {
    fn(*backends[i]);
  } catch (const WriteError& e) {
    stop(i, reason(e));
  } catch (const std::exception& e) {
    stop(i, e.what());
  } catch (...) {
    stop(i, "an exception that is not a std::exception");
  }
  in_backend = -1;
}

void Tracker::State::stop(size_t i, const std::string& why) {
  std::vector<std::string> others;
  {
    std::lock_guard<std::mutex> lock(mu);
    live[i] = false;
    others = live_names();
  }
  if (abandoned) return;  // end() has said what was given up already
  warn("the " + names[i] + " tracker stops writing " + wheres[i] + ": " + why + "; training goes on" +
       (others.empty() ? ", with no tracker writing" : ", and " + list(others) + " go on writing"));
}

std::vector<std::string> Tracker::State::live_names() const {
  std::vector<std::string> out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (live[i]) out.push_back(names[i]);
  }
  return out;
}

void Tracker::State::push(Item item, size_t non_finite, const Scalar* first) {
  std::string warning;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (stopping) return;  // after end(): nothing is written any more
    if (pending >= limits.max_pending) {
      ++counts.dropped;
      if (!warned_full) {
        warned_full = true;
        warning = "the tracker's queue holds " + std::to_string(limits.max_pending) +
                  " records not written yet (the disk is slower than the logging): records are dropped "
                  "from now on while it stays full, and end_training counts them";
      }
    } else {
      if (!begun) {
        Item b;
        b.kind = Item::Kind::Begin;
        b.start = start;
        queue.push_back(std::move(b));
        begun = true;
      }
      const int64_t step = item.step;
      queue.push_back(std::move(item));
      idle = false;
      ++pending;
      ++counts.records;
      counts.non_finite += non_finite;
      if (first && first_non_finite.empty()) {
        first_non_finite = first->tag + " at step " + std::to_string(step);
        warning = "\"" + first->tag + "\" is " + shortest(first->value) + " at step " + std::to_string(step) +
                  ": non-finite values are written as they are (each tracker in its own way); end_training "
                  "says how many there were";
      }
      wake.notify_one();
    }
  }
  if (!warning.empty()) warn(warning);
}

Tracker::Tracker(std::vector<std::unique_ptr<Backend>> backends, RunStart start, Limits limits)
    : state_(std::make_shared<State>(std::move(backends), std::move(start), limits)) {
  // The thread holds the state too: a thread end() detached frees it when it returns.
  thread_ = std::thread([s = state_] { s->run(); });
}

Tracker::~Tracker() { end(); }

void Tracker::log(int64_t step, const std::vector<Scalar>& values) {
  std::vector<Backend*> live;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    for (size_t i = 0; i < state_->backends.size(); ++i) {
      if (state_->live[i]) live.push_back(state_->backends[i].get());
    }
  }
  for (Backend* b : live) b->admit(values);  // UsageError: the caller's mistake, nothing queued
  size_t non_finite = 0;
  const Scalar* first = nullptr;
  for (const Scalar& v : values) {
    if (std::isfinite(v.value)) continue;
    ++non_finite;
    if (!first) first = &v;
  }
  State::Item item;
  item.step = step;
  item.wall_time = now_s();
  item.values = values;
  // `first` points into `values`, which outlives push().
  state_->push(std::move(item), non_finite, first);
}

void Tracker::histogram(int64_t step, Histogram h) {
  State::Item item;
  item.kind = State::Item::Kind::Histogram;
  item.step = step;
  item.wall_time = now_s();
  item.hist = std::move(h);
  state_->push(std::move(item), 0, nullptr);
}

void Tracker::resume(int64_t first_step, const std::string& checkpoint) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.stopping) return;
  s.start.first_step = first_step;
  s.start.resumed_from = checkpoint;
  if (!s.begun) return;  // the first record's begin() carries them
  State::Item b;
  b.kind = State::Item::Kind::Begin;
  b.start = s.start;
  s.queue.push_back(std::move(b));
  s.idle = false;
  s.wake.notify_one();
}

bool Tracker::drain(double timeout_s) {
  if (!thread_.joinable()) return true;
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mu);
  const bool drained = s.done.wait_for(lock, std::chrono::duration<double>(std::clamp(timeout_s, 0.0, 1e7)),
                                       [&] { return s.idle || s.finished || s.abandoned; });
  if (!drained) {
    const std::string msg = "the tracker's writer thread did not write its queue within " + shortest(timeout_s) +
                            " s (" + std::to_string(s.pending) + " records waiting for " + list(s.live_names()) +
                            "); going on without waiting for it";
    lock.unlock();
    warn(msg);
  }
  return drained;
}

void Tracker::end() {
  if (!thread_.joinable()) return;
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mu);
  s.stopping = true;
  s.wake.notify_all();
  const double limit_s = std::clamp(s.limits.end_timeout_s, 0.0, 1e7);
  if (s.done.wait_for(lock, std::chrono::duration<double>(limit_s), [&] { return s.finished; })) {
    lock.unlock();
    thread_.join();
  } else {
    // A write that does not return (a hung network file system) must not hang the process at
    // exit: the thread is detached, holding the state, and writes nothing more if it ever returns.
    s.abandoned = true;
    const int b = s.in_backend;
    const std::string where = b >= 0 ? "stuck in the " + s.names[b] + " tracker's " + s.in_call.load() +
                                           " on " + s.wheres[b]
                                     : "still writing";
    const std::string msg = "end_training gave up after " + shortest(limit_s) +
                            " s waiting for the tracker's writer thread, " + where + ": " +
                            std::to_string(s.pending) +
                            (s.pending == 1 ? " queued record is" : " queued records are") + " not written to " +
                            list(s.live_names()) +
                            ", nor what they buffered flushed; the thread is left behind so that the process can exit";
    lock.unlock();
    thread_.detach();
    warn(msg);
  }
  lock.lock();
  std::string summary;
  if (s.counts.non_finite > 0) {
    summary = std::to_string(s.counts.non_finite) + " non-finite values were written as they are (the first: " +
              s.first_non_finite + ")";
  }
  if (s.counts.dropped > 0) {
    summary += (summary.empty() ? "" : "; ") + std::to_string(s.counts.dropped) +
               " records were dropped because " + std::to_string(s.limits.max_pending) +
               " were waiting to be written already";
  }
  lock.unlock();
  if (!summary.empty()) warn(summary);
}

TrackerCounts Tracker::counts() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->counts;
}

std::vector<std::string> Tracker::live_backends() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->live_names();
}

}  // namespace xlaunch::track
