// The watchdog's verdicts: one line that says what the job waited for, who never came, and for how
// long. Pure text from the boards (board.h), so each shape is tested with literal boards.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "watch/board.h"
#include "xlaunch/status/verdict_file.h"

namespace xlaunch::watch {

// The verdict file's record (exit code, rank at fault, message): one struct for the ranks that
// write it and the launcher that reads it.
using Verdict = status::Verdict;

// "allreduce #457 (bucket 2, 1.0 MiB float32)".
std::string describe(const CollectiveRecord& r);

// No progress for `waited_ns` in `open` (this rank's oldest unfinished collective). boards: every
// rank's board by rank, null where none is visible. When the ranks are in different collectives of
// open's number (a desync: xlaunch/status/flight_recorder.h), the verdict says so and names the
// ranks on the other path.
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

// Writes the verdict to the status directory `dir` (status::write_verdict) unless another rank
// already has (one verdict per job), and then prints it on stderr. Returns whether this call was
// the one. An empty dir (no status directory): printed, and true.
bool publish_verdict(const std::string& dir, const Verdict& v);

}  // namespace xlaunch::watch
