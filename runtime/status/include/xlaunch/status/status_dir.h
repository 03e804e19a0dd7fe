// The status directory: how `xlaunch run` and the ranks of its job talk through files. The launcher
// makes one private directory per attempt (private_files.h) and hands it to the ranks as
// XLAUNCH_STATUS_DIR (xlaunch/env_vars.h). Every file of it, and the timeline parts in
// XLAUNCH_TRACE_DIR, is named, laid out, written and read by this library alone, which both sides
// link (no torch, no MPI):
//
//   file                written by                          read by                         header
//   started-<R>         rank R's wrapper, when it starts    xlaunch run (start-up deadline) rank_status.h
//   agent-<host>        the wrapper of the ssh (rsh agent)  xlaunch run (start-up deadline) rank_status.h
//                       that started host's Open MPI daemon
//   rank-<R>            rank R's wrapper (`xlaunch __rank`)   xlaunch run, when mpirun ends   rank_status.h
//   verdict             the first rank whose watchdog         xlaunch run, when mpirun ends   verdict.h
//                       reached one
//   stats-<R>           rank R, at the end of every step      xlaunch run (--monitor, report) step_stats.h
//   syncs-<R>           rank R counting host-device syncs   xlaunch run (report)            sync_stats.h
//                       (debug on a GPU), every step
//   progress-<R>        rank R (its progress board)           the other ranks' watchdogs,     progress_board.h
//                                                           xlaunch run (flight recorder)
//   trace-rank<R>.json  rank R, when it ends (trace dir)      xlaunch run, which merges them  trace_part.h
//   ops-<R>.json        rank R, when its profile_ops steps    xlaunch run (operator table,    op_table.h
//                       end                                 report.json, timeline)
//   scalars.jsonl       rank 0's tracker, with tracking on     xlaunch run, for report.html    here (name)
//                       (trace dir)
//
// The progress board (progress-<R>) is laid out in progress_board.h: the ranks create and keep it
// (runtime/src/watch/board.h); the launcher reads it for the flight recorder (flight_recorder.h).
#pragma once

#include <string>

namespace xlaunch::status {

// Where a private directory goes when nobody chose one (the launcher's status directory without a
// log_dir, the ranks' own when started without xlaunch): $TMPDIR when set and not empty, else /tmp.
std::string temp_dir();

// dir/progress-<rank>: the file rank `rank` maps its progress board to.
std::string progress_board_path(const std::string& dir, int rank);

// In the trace directory: what rank 0's tracker logged (acc.log's scalars and the utilization
// records), in the JSONL backend's format (runtime/src/track/backends.h), written when tracking
// is on and the job runs with --trace; report.html charts it (launcher/src/observe/logged_scalars.h).
// `xlaunch run` removes an earlier job's before it starts the ranks.
inline constexpr const char* kLoggedScalarsFile = "scalars.jsonl";

}  // namespace xlaunch::status
