// `verdict` in the status directory (status_dir.h): the one verdict of a job's watchdog. The first
// rank that reaches one writes it (its text comes from runtime/src/watch/verdict.h); `xlaunch run`
// reads it when mpirun ends, and it decides the job's exit code. Text:
// "<exit code> <rank>\n<message>\n".
#pragma once

#include <optional>
#include <string>

namespace xlaunch::status {

struct Verdict {
  int exit_code = 1;    // what the job exits with: 124 for a stuck job
  int rank = -1;        // the rank at fault (the first that never entered, the one that left)
  std::string message;  // one line, without the "xlaunch: " prefix
};

// Writes dir/verdict (O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600) unless it exists: one verdict per job.
// Returns whether this call wrote it (false: another rank's stands, or dir cannot hold it).
bool write_verdict(const std::string& dir, const Verdict& v);

// dir/verdict, if dir is a private directory of this user's, the verdict a regular file owned by
// this user, and it parses.
std::optional<Verdict> read_verdict(const std::string& dir);

}  // namespace xlaunch::status
