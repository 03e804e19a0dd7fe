#include "watch/watchdog.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "watch/board.h"
#include "watch/verdict.h"
#include "xlaunch/error.h"

namespace xlaunch::watch {
namespace {

constexpr int64_t kSecond = 1000000000;
constexpr int64_t kGraceNs = 2 * kSecond;  // for mpirun to end a job whose rank failed
constexpr int64_t kAbortBoundNs = 5 * kSecond;  // for the transports' abort, after the verdict

struct Watch {
  Settings settings;
  Board* mine = private_board();
  std::mutex peers_mu;              // the watchdog's thread and (debug) the communication threads
  std::vector<const Board*> peers;  // by rank; null until the peer's board can be read
  std::vector<int64_t> gone_since;  // by rank: when the peer's process was first seen gone
  std::atomic<bool> running{false};
  std::mutex pollers_mu;
  std::map<int, std::function<std::string(bool)>> pollers;
  int next_poller = 0;
  // The pollers run on a thread of their own (poll_loop), never on the watchdog's: a device query
  // can block in the driver (a thread stuck in cudaFree behind a hung NCCL kernel holds its lock),
  // and the watchdog must still judge. Its heartbeat: when its current round began (0 between
  // rounds); and the first error a round reported.
  std::atomic<int64_t> poll_round_ns{0};
  std::mutex poll_error_mu;
  std::string poll_error;
};

Watch& watch() {
  static auto* w = new Watch;  // never destroyed: the exit handler and the thread use it to the end
  return *w;
}

thread_local int t_bucket = -1;
std::atomic<bool> g_logging{true};

const Board* peer(Watch& w, int r) {
  if (r == w.settings.rank) return w.mine;
  std::lock_guard<std::mutex> lk(w.peers_mu);
  if (!w.peers[r] && !w.settings.dir.empty()) w.peers[r] = open_peer_board(w.settings.dir, r);
  return w.peers[r];
}

// For a joined rank: the newest sign of work of the ranks that have not joined (their training loop,
// or a collective issued or finished), or -1 when one of them has no visible board. No such rank
// (every rank has joined: they are all in the last rounds together): 0, nothing to add.
int64_t last_work_of_active(Watch& w) {
  int64_t newest = 0;
  for (int r = 0; r < w.settings.world; ++r) {
    if (r == w.settings.rank) continue;
    const Board* b = peer(w, r);
    if (!b) return -1;
    if (b->joined.load()) continue;
    newest = std::max({newest, b->alive_ns.load(), b->last_done_ns.load()});
    const uint64_t n = b->issued.load(std::memory_order_acquire);
    if (const CollectiveRecord* last = n ? b->find(n - 1) : nullptr) newest = std::max(newest, last->issued_ns.load());
  }
  return newest;
}

// A peer on this machine (its board's host is ours) whose process no longer exists.
bool process_gone(const Board& mine, const Board& b) {
  return std::strncmp(mine.host, b.host, sizeof b.host) == 0 && kill(b.pid, 0) != 0 && errno == ESRCH;
}

// Runs every poller; the first error any of them reports. A poller that throws (a sticky CUDA error
// from a training kernel surfaces as an exception of the event query) reports what it threw: the
// watchdog's thread must reach a verdict, never std::terminate.
std::string poll_all(Watch& w, bool ending) {
  std::lock_guard<std::mutex> lk(w.pollers_mu);
  std::string error;
  for (auto& [id, poll] : w.pollers) {
    std::string e;
    try {
      e = poll(ending);
    } catch (const std::exception& ex) {
      e = ex.what();
    } catch (...) {
      e = "unknown exception";
    }
    if (!e.empty() && e.find("rank ") == std::string::npos)
      e = "rank " + std::to_string(w.settings.rank) + ": " + e;
    if (error.empty()) error = std::move(e);
  }
  return error;
}

// The verdict and the exit record first, so the launcher and the peers learn why at once; then the
// transports' abort (ncclCommAbort) on a helper thread, waited for at most kAbortBoundNs; then the
// exit, whether or not the abort returned. An abort can block when the peers do not abort too
// (NCCL issues 863, 992, 1777), which is exactly the situation that brings the watchdog here.
[[noreturn]] void conclude(Watch& w, const Verdict& v) {
  publish_verdict(w.settings.dir, v);
  record_exit(v.exit_code);
  std::fflush(stdout);
  std::fflush(stderr);
  auto done = std::make_shared<std::promise<void>>();
  const std::future<void> aborted = done->get_future();
  std::thread([&w, done] {
    poll_all(w, true);
    done->set_value();
  }).detach();
  if (aborted.wait_for(std::chrono::nanoseconds(kAbortBoundNs)) != std::future_status::ready)
    std::fprintf(stderr,
                 "xlaunch: rank %d: the communicators' abort (ncclCommAbort) did not return within %lld s; "
                 "exiting without it\n",
                 w.settings.rank, static_cast<long long>(kAbortBoundNs / kSecond));
  std::fflush(stderr);
  _exit(v.exit_code);
}

// The pollers' thread: a round every 100 ms, its start published (the heartbeat), its first error
// kept for the watchdog.
void poll_loop() {
  Watch& w = watch();
  while (w.running.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    w.poll_round_ns.store(now_ns());
    std::string error = poll_all(w, false);
    w.poll_round_ns.store(0);
    if (error.empty()) continue;
    std::lock_guard<std::mutex> lk(w.poll_error_mu);
    if (w.poll_error.empty()) w.poll_error = std::move(error);
  }
}

// A round of the pollers that has not returned for timeout_s: the device does not answer.
void check_pollers(Watch& w, int64_t now) {
  const int64_t round = w.poll_round_ns.load();
  if (!round || now - round <= static_cast<int64_t>(w.settings.timeout_s * kSecond)) return;
  Verdict v;
  v.rank = w.settings.rank;
  v.exit_code = 124;
  char text[320];
  std::snprintf(text, sizeof text,
                "rank %d: the device stopped answering: a query of its communicators (a CUDA event, NCCL's "
                "error state) has not returned for %.0f s. A CUDA call is blocked in the driver, usually behind "
                "a kernel that never ends (a hung NCCL collective); see the GPU's state with nvidia-smi",
                w.settings.rank, static_cast<double>(now - round) / kSecond);
  v.message = text;
  conclude(w, v);
}

void check(Watch& w) {
  {
    std::unique_lock<std::mutex> lk(w.poll_error_mu);
    if (!w.poll_error.empty()) {
      Verdict v;
      v.rank = w.settings.rank;
      v.message = w.poll_error;
      lk.unlock();
      conclude(w, v);
    }
  }
  const CollectiveRecord* open = oldest_open(*w.mine);
  if (!open) return check_pollers(w, now_ns());
  const uint64_t seq = open->seq.load();
  const int64_t now = now_ns();
  for (int r = 0; r < w.settings.world; ++r) {
    if (r == w.settings.rank) continue;
    const Board* b = peer(w, r);
    if (!b || b->issued.load() > seq) continue;  // it entered this collective (or is not visible)
    if (b->life.load() == int32_t(Life::Exited)) {
      if (b->exit_status.load() == 0 || now - b->exit_ns.load() > kGraceNs)
        conclude(w, left_verdict(w.settings.rank, *open, r, *b, now));
    } else if (process_gone(*w.mine, *b)) {
      if (!w.gone_since[r]) w.gone_since[r] = now;
      if (now - w.gone_since[r] > kGraceNs) conclude(w, gone_verdict(w.settings.rank, *open, r, *b, now));
    }
  }
  const int64_t start = open->start_ns.load() ? open->start_ns.load() : open->issued_ns.load();
  int64_t since = std::max(start, w.mine->last_done_ns.load());
  if (w.mine->joined.load()) {
    const int64_t work = last_work_of_active(w);
    if (work < 0) return check_pollers(w, now);  // they cannot be seen from here: their own watchdogs judge
    since = std::max(since, work);
  }
  if (now - since > static_cast<int64_t>(w.settings.timeout_s * kSecond)) {
    std::vector<const Board*> boards(w.settings.world);
    for (int r = 0; r < w.settings.world; ++r) boards[r] = peer(w, r);
    conclude(w, stuck_verdict(*open, boards, now - since, now));
  }
  check_pollers(w, now);
}

void loop() {
  Watch& w = watch();
  while (w.running.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    check(w);
  }
}

// Debug: waits (bounded by the timeout, and by the peer leaving) until rank r has issued `seq`, and
// compares the two collectives.
void compare_with(Watch& w, int r, const CollectiveRecord& mine) {
  const uint64_t seq = mine.seq.load();
  const int64_t deadline = now_ns() + static_cast<int64_t>(w.settings.timeout_s * kSecond);
  auto pause = std::chrono::microseconds(20);
  const Board* b = peer(w, r);
  if (!b) return;  // not visible from here (another machine, no shared directory): nothing to compare
  for (;;) {
    if (b->issued.load(std::memory_order_acquire) > seq) {
      const CollectiveRecord* theirs = b->find(seq);
      if (theirs && !same_collective(mine, *theirs)) {
        const Verdict v = mismatch_verdict(w.settings.rank, mine, r, *theirs);
        publish_verdict(w.settings.dir, v);
        throw CommError(v.message);
      }
      return;
    }
    if (b->life.load() == int32_t(Life::Exited) || now_ns() > deadline) return;  // the watchdog decides
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
}

}  // namespace

void start(const Settings& s) {
  Watch& w = watch();
  if (w.running.load()) return;
  w.settings = s;
  w.peers.assign(s.world, nullptr);
  w.gone_since.assign(s.world, 0);
  if (!s.dir.empty()) w.mine = create_board(s.dir, s.rank, s.world);
  w.running = true;
  std::thread(loop).detach();  // ends with the process: it must be able to end a stuck one
  std::thread(poll_loop).detach();
}

void open_peer_boards() {
  Watch& w = watch();
  for (int r = 0; r < w.settings.world; ++r) peer(w, r);
}

void disable(const Settings& s) {
  watch().settings = s;
  g_logging.store(false);
}

const Settings& settings() { return watch().settings; }

int add_poller(std::function<std::string(bool)> poll) {
  Watch& w = watch();
  std::lock_guard<std::mutex> lk(w.pollers_mu);
  w.pollers[w.next_poller] = std::move(poll);
  return w.next_poller++;
}

void remove_poller(int id) {
  Watch& w = watch();
  std::lock_guard<std::mutex> lk(w.pollers_mu);
  w.pollers.erase(id);
}

bool record_exit(int status) {
  Watch& w = watch();
  Board* b = w.mine;
  if (b->life.load() != int32_t(Life::Exited)) {
    b->exit_status.store(status);
    b->exit_ns.store(now_ns());
    b->life.store(int32_t(Life::Exited), std::memory_order_release);
  }
  return status != 0 && w.settings.world > 1;
}

BucketScope::BucketScope(int bucket) : saved_(t_bucket) { t_bucket = bucket; }
BucketScope::~BucketScope() { t_bucket = saved_; }
int current_bucket() { return t_bucket; }

uint64_t issued(const char* op, const char* dtype, int64_t numel, int elem_bytes) {
  if (!g_logging.load(std::memory_order_relaxed)) return 0;
  Board& b = *watch().mine;
  const uint64_t seq = b.issued.fetch_add(1, std::memory_order_acq_rel);
  b.log_issued(seq, op, dtype, numel, elem_bytes, t_bucket, now_ns());
  return seq;
}

void started(uint64_t seq) {
  if (!g_logging.load(std::memory_order_relaxed)) return;
  Watch& w = watch();
  if (!w.mine->log_started(seq, now_ns())) return;  // its slot holds a newer collective
  if (!w.settings.debug) return;
  const CollectiveRecord& r = w.mine->slot(seq);
  for (int p = 0; p < w.settings.world; ++p)
    if (p != w.settings.rank) compare_with(w, p, r);
}

void finished(uint64_t seq, bool ok) {
  if (!g_logging.load(std::memory_order_relaxed)) return;
  Board& b = *watch().mine;
  const int64_t t = now_ns();
  b.log_finished(seq, ok, t);
  b.last_done_ns.store(t, std::memory_order_relaxed);
  b.completed.fetch_add(1, std::memory_order_acq_rel);
}

void set_joined(bool joined) {
  if (!g_logging.load(std::memory_order_relaxed)) return;
  watch().mine->joined.store(joined ? 1 : 0, std::memory_order_release);
}

void mark_alive(status::Phase phase) {
  if (!g_logging.load(std::memory_order_relaxed)) return;
  Board& b = *watch().mine;
  b.phase.store(static_cast<int32_t>(phase), std::memory_order_relaxed);
  b.alive_ns.store(now_ns(), std::memory_order_relaxed);
}

void set_step(int64_t step) {
  if (!g_logging.load(std::memory_order_relaxed)) return;
  Board& b = *watch().mine;
  b.step.store(step, std::memory_order_relaxed);
  b.step_ns.store(now_ns(), std::memory_order_relaxed);
}

}  // namespace xlaunch::watch
