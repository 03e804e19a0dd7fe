// How each rank ended, and what the whole job's outcome is.
//
// Every rank runs as `xlaunch __rank --status_dir D -- bin args` (rank_wrapper.h), which records
// the training process's exit code or signal in D/rank-R. After mpirun returns, the launcher reads
// D and summarize_job() names the rank that failed first: mpirun then kills the others, so later
// failures are consequences, not causes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace xlaunch::launcher {

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

// "exited with code 3", "was killed by signal 9 (SIGKILL)".
std::string describe(const RankStatus& s);

// The watchdog's verdict (runtime/src/watch/verdict.h), when a rank reached one: D/verdict holds
// "<exit code> <rank>\n<message>\n".
struct JobVerdict {
  int exit_code = 1;
  int rank = -1;
  std::string message;
};

// D/verdict, if D is a private directory of this user's, the verdict a regular file owned by this
// user, and it parses.
std::optional<JobVerdict> read_verdict(const std::string& dir);

struct JobOutcome {
  int exit_code = 0;    // what `xlaunch run` returns
  int rank = -1;        // the rank at fault, when one is known
  std::string message;  // empty on success
};

// Pure. mpirun_wait_status: waitpid's status for mpirun; num_processes: ranks expected.
// A verdict decides (a stuck job: 124; a rank that left early or a mismatch: 1; a rank that failed
// while others waited: its code); else a failed rank decides the exit code (its code, or 128 +
// signal); without one, mpirun's does. When the first failures are every rank of one machine, of
// a job on several, and no rank elsewhere failed the same way, the message names the machine and
// its ranks ("machine sim1 (ranks 2, 3): every rank was killed by signal 9 (SIGKILL)"): a machine
// lost, not a bug in one rank. Ranks that left no status, when every rank that did was stopped by
// mpirun (SIGTERM), are named first: they went with their wrappers (a machine or its daemon lost).
JobOutcome summarize_job(int mpirun_wait_status, const std::vector<RankStatus>& ranks, int num_processes,
                         const std::optional<JobVerdict>& verdict = std::nullopt);

}  // namespace xlaunch::launcher
