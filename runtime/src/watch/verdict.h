// The watchdog's verdicts: one line that says what the job waited for, who never came, and for how
// long. Pure text from the boards (board.h), so each shape is tested with literal boards.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "watch/board.h"

namespace xlaunch::watch {

struct Verdict {
  int exit_code = 1;    // what the deciding rank exits with: 124 for a stuck job
  int rank = -1;        // the rank at fault (the first that never entered, the one that left)
  std::string message;  // without the "xlaunch: " prefix
};

// "allreduce #457 (bucket 2, 1.0 MiB float32)".
std::string describe(const CollectiveRecord& r);

// No progress for `waited_ns` in `open` (this rank's oldest unfinished collective). boards: every
// rank's board by rank, null where none is visible.
Verdict stuck_verdict(const CollectiveRecord& open, const std::vector<const Board*>& boards, int64_t waited_ns,
                      int64_t now_ns);
// Rank `gone` ended (its board says how) without entering `open`, which rank `me` waits in.
Verdict left_verdict(int me, const CollectiveRecord& open, int gone, const Board& theirs, int64_t now_ns);
// Rank `gone`'s process no longer exists, and its board says nothing of an exit.
Verdict gone_verdict(int me, const CollectiveRecord& open, int gone, const Board& theirs, int64_t now_ns);

// Debug: whether two ranks' collectives of one sequence number are the same (op, dtype, size).
bool same_collective(const CollectiveRecord& a, const CollectiveRecord& b);
// "collective mismatch at #12: rank 0 is in allreduce #12 of [1024] float32, rank 1 in broadcast
// #12 of [10] int64". The rank at fault is the one that differs from rank 0 (ranks compare with
// rank 0 first, so `other` is rank 0 only when `me` differs from it).
Verdict mismatch_verdict(int me, const CollectiveRecord& mine, int other, const CollectiveRecord& theirs);

// Prints the verdict on stderr and writes it to dir/verdict ("<exit code> <rank>\n<message>\n",
// O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600), unless another rank already has: one verdict per job.
// Returns whether this call was the one.
bool publish_verdict(const std::string& dir, const Verdict& v);

}  // namespace xlaunch::watch
