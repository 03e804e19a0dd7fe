// The flight recorder as `xlaunch run` and `xlaunch debug` show it (xlaunch/status/flight_recorder.h):
// every rank's last collectives, read from the progress boards of the job's status directory.
#pragma once

#include <cstdio>
#include <string>

namespace xlaunch::launcher {

// The file a failed attempt's flight recorder is saved to in log_dir.
std::string flight_file_name(const std::string& run_id, int attempt);

// For a failed attempt: prints "last collectives:" and the finding (a desync, a straggler) to out,
// from the boards in status_dir (world ranks); with a log_dir, also saves them there as
// flight_file_name() and says so. Prints nothing when no rank issued a collective.
void report_flight(FILE* out, const std::string& status_dir, int world, const std::string& log_dir,
                   const std::string& run_id, int attempt);

// `xlaunch debug DIR`: the same table and finding from a job's status directory (its boards, while it
// runs: the time is now), or from the newest flight-recorder-*.json in DIR (a log_dir after a failed
// attempt: the time is when it was saved), or from that file itself. 0 when printed; 2, saying what
// was looked for, when DIR holds neither.
int print_flight(FILE* out, const std::string& dir);

}  // namespace xlaunch::launcher
