// The flight recorder: every rank's last collectives, merged. Each rank already keeps its last kRing
// (64) collectives on its progress board (progress_board.h: sequence number, op, dtype, size,
// bucket, when issued, started and finished, state) with plain stores, so recording costs nothing
// more. When a job fails, `xlaunch run` reads every board it can see (a shared log_dir makes other
// machines' visible), prints flight_table() and flight_finding() under the failure, and with a
// log_dir saves them (flight_json) as <log_dir>/flight-recorder-<run id>-<attempt>.json, which
// `xlaunch debug DIR` prints again; `xlaunch debug STATUS_DIR` reads the boards of a job still
// running. Pure text from snapshots, so each shape is tested with literal ones.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "xlaunch/status/progress_board.h"

namespace xlaunch::status {

struct FlightEntry {
  uint64_t seq = 0;
  std::string op, dtype;
  int64_t numel = 0;
  int elem_bytes = 0;
  int bucket = -1;
  int64_t issued_ns = 0, start_ns = 0, end_ns = 0;
  CollState state = CollState::Empty;
};

// One rank, as its board read at one moment.
struct RankFlight {
  int rank = 0;
  bool seen = false;  // its board could be read; nothing else is set otherwise
  std::string host;
  int pid = 0;
  bool exited = false;
  int exit_status = 0;
  bool joined = false;
  int64_t step = 0;
  uint64_t issued = 0;  // collectives issued: the last has number issued - 1
  int64_t alive_ns = 0;
  Phase phase = Phase::None;
  std::vector<FlightEntry> entries;  // the ring's records, ascending sequence numbers
};

RankFlight snapshot(const Board& b);

// A collective's size as the tables and verdicts write it: "1.0 MiB", "12.5 KiB", "80 B".
std::string size_text(int64_t bytes);

// Ranks as every message writes them: "rank 3", "ranks 0, 2".
std::string rank_list(const std::vector<int>& ranks);

// Ranks 0..world-1 from their boards in dir (unseen where one cannot be read).
std::vector<RankFlight> read_flight(const std::string& dir, int world);

// The world of the boards in dir (rank 0's, else the first readable one's); 0 when there is none.
int flight_world(const std::string& dir);

// Rows of "last collectives:": the last `last` sequence numbers any rank issued; for each, one row
// per rank that issued it (op, size, state and time), one for each rank that never entered the
// first of them (its last finished collective and what it was doing), and one per rank whose board
// was not visible. "" when no rank issued a collective. Times relative to now_ns.
std::string flight_table(const std::vector<RankFlight>& ranks, int64_t now_ns, int last = 3);

// The one finding the boards support, "" when none: a desync ("rank 2 is in broadcast #341 while
// ranks 0, 1, 3 are in allreduce #341: the training loop took another path on rank 2"), else a
// straggler ("every rank but 3 entered allreduce #512; rank 3 last finished #511 11.2 s ago and is
// in forward").
std::string flight_finding(const std::vector<RankFlight>& ranks, int64_t now_ns);

// The lowest sequence number at which the ranks' collectives differ (op, dtype or size), if any,
// among the ranks that have not joined (uneven inputs: a joined rank's collectives are its own):
// the text flight_finding() gives for it, and the ranks on the other path (those outside the
// largest group; every group but the first when two are as large).
struct Desync {
  uint64_t seq = 0;
  std::string text;
  std::vector<int> odd;
};
std::optional<Desync> find_desync(const std::vector<RankFlight>& ranks);

// The snapshots and the moment they were taken, as one JSON document, and back (nullopt when the
// text is not one).
std::string flight_json(const std::vector<RankFlight>& ranks, int64_t taken_ns);
std::optional<std::pair<std::vector<RankFlight>, int64_t>> parse_flight_json(const std::string& text);

}  // namespace xlaunch::status
