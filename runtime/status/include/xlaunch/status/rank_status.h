// rank-<R> in the status directory (status_dir.h): how rank R's training process ended. Every rank
// runs as `xlaunch __rank --status_dir D -- bin args` (launcher/src/launch/rank_wrapper.h), which
// writes it; `xlaunch run` reads them all after mpirun returns (launcher/src/launch/job_outcome.h).
// One line: "<rank> <signaled 0|1> <code> <end_ns> <host>\n".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace xlaunch::status {

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

}  // namespace xlaunch::status
