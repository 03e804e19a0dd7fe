// The start-up deadline (docs/failures.md, "When a job does not start"): `xlaunch run` gives the
// job startup_deadline_s(), from mpirun's start, to show a first sign of life; past it, the job is
// ended as a failed one is (supervise.h) and the machines whose ranks never appeared are named.
// Open MPI starts no rank before the daemon of every machine has called back, so the first rank
// seen (any rank) proves that no daemon hangs: the deadline is then over, and a rank whose sign of
// life is lost on its way (a hello a firewall drops) never ends a healthy job.
//
// Open MPI's mpirun waits for ever for a daemon that dies before it calls back (a wrong path on
// that machine, a full disk, a firewall; orte_startup_timeout does not bound this), and then no
// rank starts and no status exists. A rank's wrapper (`xlaunch __rank`) shows it has started in
// two ways, before it starts the training program:
//   - started-<R> in the status directory (rank_status.h), where that directory is seen (the
//     launching machine, or every machine with a shared log_dir);
//   - a hello: one line over TCP to the launcher (HelloListener), at the addresses of mpirun's own
//     out-of-band port (OMPI_MCA_orte_hnp_uri: mpirun runs beside `xlaunch run`, and every machine
//     of the job reaches it), so that machines without the shared directory are seen too.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace xlaunch::launcher {

// How long the wrapper tries one address of the launcher with its hello, and for how long in all
// it tries again (1, 2, 4, ... s apart) while none took it.
inline constexpr int kHelloTimeoutMs = 2000;
inline constexpr int kHelloRetryForS = 30;

// Pure: the seconds every rank has to show a first sign of life: startup_timeout_s, at most
// timeout_s x 6 when timeout_s (the watchdog's bound) is set; 0: no deadline.
int startup_deadline_s(int startup_timeout_s, int timeout_s);

// Pure: what ties a hello to one attempt of one job: the status directory's last path component
// (xlaunch-status-<run id>-<attempt>-<random>, unique per attempt).
std::string hello_tag(const std::string& status_dir);

// Pure: the line rank `rank` of the attempt `tag` sends: "xlaunch-hello <tag> <rank> <host>\n".
std::string hello_line(const std::string& tag, int rank, const std::string& host);

// Pure: the rank a hello line of this tag names; nullopt for anything else (another attempt's,
// a stray connection's bytes).
std::optional<int> parse_hello(const std::string& line, const std::string& tag);

// The wrapper's side: sends `line` to the first of these hosts that accepts a connection at port,
// trying each for at most timeout_ms, and all of them again 1, 2, 4, ... s later for up to
// retry_for_s. False when none took it.
bool send_hello(const std::vector<std::pair<std::string, int>>& hosts, int port, const std::string& line,
                int timeout_ms, int retry_for_s = 0);

// The launcher's side: a TCP socket listening on every address at a port the kernel chose, for the
// whole `xlaunch run` (every attempt). Not thread-safe; poll() from the supervising loop.
class HelloListener {
 public:
  HelloListener();  // never throws: when no socket can be had, port() is 0 and no hello arrives
  ~HelloListener();
  HelloListener(const HelloListener&) = delete;
  HelloListener& operator=(const HelloListener&) = delete;

  int port() const { return port_; }
  // Accepts the connections waiting, reads what they sent without blocking, and adds to *ranks
  // the rank of each complete hello of `tag`. A connection that sent nothing whole within a few
  // seconds, or more than a line's worth, is dropped, as is the oldest beyond kMaxPending.
  void poll(const std::string& tag, std::set<int>* ranks);
  // Closes the connections still pending (once every rank is seen).
  void drop_pending();
  static constexpr size_t kMaxPending = 256;

 private:
  struct Pending {
    int fd;
    int64_t since_ns;
    std::string got;
  };
  int fd_ = -1, port_ = 0;
  std::vector<Pending> pending_;
};

// Pure: the clock of the deadline (CLOCK_MONOTONIC nanoseconds: a clock step during start-up
// moves nothing). Ranks are marked seen as their signs of life arrive; expired() is true once, at
// the first call at or past start + deadline while no rank has been seen.
class StartupDeadline {
 public:
  StartupDeadline(int deadline_s, int num_processes, int64_t start_ns);
  void seen(int rank);
  bool all_seen() const { return seen_.size() >= static_cast<size_t>(num_processes_); }
  bool any_seen() const { return !seen_.empty(); }
  bool expired(int64_t now_ns);
  std::vector<int> missing() const;  // ranks not seen, ascending
  int deadline_s() const { return deadline_s_; }

 private:
  int deadline_s_, num_processes_;
  int64_t start_ns_;
  std::set<int> seen_;
  bool fired_ = false;
};

// Pure: the ranks that never started, by machine when rank_hosts (supervise.h's rank_hosts(), one
// host per rank) knows them: "machine sim1 (ranks 2, 3)"; joined by ", ". Else "ranks 2, 3".
std::string never_started_text(const std::vector<int>& missing, const std::vector<std::string>& rank_hosts);

}  // namespace xlaunch::launcher
