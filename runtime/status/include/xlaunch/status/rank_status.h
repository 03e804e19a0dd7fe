// rank-<R> in the status directory (status_dir.h): how rank R's training process ended. Every rank
// runs as `xlaunch __rank --status_dir D -- bin args` (launcher/src/launch/rank_wrapper.h), which
// writes it; `xlaunch run` reads them all after mpirun returns (launcher/src/launch/job_outcome.h).
// One line: "<rank> <signaled 0|1> <code> <end_ns> <host>\n".
//
// started-<R>: rank R's wrapper has started, its first sign of life (`xlaunch run`'s start-up
// deadline, launcher/src/launch/startup.h). One line: "<rank> <start_ns> <host>\n". Written only
// where the directory is seen (a shared log_dir, or the launching machine); the wrapper's hello to
// the launcher carries the same news from everywhere else.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace xlaunch::status {

// CLOCK_REALTIME in nanoseconds: the clock every time in the status directory is on.
int64_t realtime_ns();

struct RankStatus {
  int rank = 0;
  bool signaled = false;  // killed by a signal (code is the signal number) vs exited (code is the exit code)
  int code = 0;
  int64_t end_ns = 0;     // CLOCK_REALTIME when it ended; orders the failures
  std::string host;       // the machine it ran on ("" when unknown: a status written before hosts were)
};

// Writes dir/rank-R atomically (a new temporary file, then rename), when dir is a private
// directory of this user's (private_files.h); an empty s.host is written as this machine's host
// name. Returns false and sets *why otherwise.
bool write_rank_status(const std::string& dir, const RankStatus& s, std::string* why);

// Every status in dir, by rank, when dir is a private directory of this user's. Only regular files
// this user owns are read (a forged or linked one is skipped), and unparsable ones are skipped.
std::vector<RankStatus> read_rank_statuses(const std::string& dir);

struct RankStart {
  int rank = 0;
  int64_t start_ns = 0;  // CLOCK_REALTIME when its wrapper started
  std::string host;      // "" when written: this machine's host name
};

// Writes dir/started-R as write_rank_status writes rank-R.
bool write_rank_start(const std::string& dir, const RankStart& s, std::string* why);

// Every started-R in dir, by rank, read as read_rank_statuses reads rank-R.
std::vector<RankStart> read_rank_starts(const std::string& dir);

// agent-<host>: how the program mpirun started Open MPI's daemon on `host` with (ssh, or the
// plm_rsh_agent set) ended, written by its wrapper (`xlaunch __agent`, launcher/src/launch/
// agent.h) on the launching machine: "<exit code, or 128 + signal> <end_ns> <host>\n" and then the
// last lines it wrote to stderr.
struct AgentReport {
  std::string host;
  int code = 0;
  int64_t end_ns = 0;
  std::string said;  // the end of its stderr, whole lines, at most kAgentSaidBytes
};
inline constexpr size_t kAgentSaidBytes = 600;

// Writes dir/agent-<host> (characters other than letters, digits, '.', '-' and '_' in the name
// as '_') as write_rank_status writes rank-R.
bool write_agent_report(const std::string& dir, const AgentReport& a, std::string* why);

// Every agent-<host> in dir, by host.
std::vector<AgentReport> read_agent_reports(const std::string& dir);

}  // namespace xlaunch::status
