// The progress board (xlaunch/status/progress_board.h, its layout and the collective log's changes)
// as the ranks keep it: each rank creates its own in the status directory and maps its peers'.
//
// Without a status directory (a world of one, a process started by hand) the board lives in this
// process's memory only: the ring is always kept.
#pragma once

#include <cstdint>
#include <string>

#include "xlaunch/status/progress_board.h"

namespace xlaunch::watch {

using status::Board;
using status::CollectiveRecord;
using status::CollState;
using status::kBoardMagic;
using status::kRing;
using status::Life;
using status::oldest_open;
using status::Phase;
using status::tagged;

int64_t now_ns();

// The board file of `rank` under dir (its name: xlaunch/status/status_dir.h).
std::string board_path(const std::string& dir, int rank);

// Creates this rank's board in dir (O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600) and maps it. Throws
// CommError naming the file when it cannot (an existing file is never reused).
Board* create_board(const std::string& dir, int rank, int world);
// Maps another rank's board read-only (status::map_board); nullptr while it cannot be read.
const Board* open_peer_board(const std::string& dir, int rank);
// A board in this process's memory, for when there is no directory.
Board* private_board();

}  // namespace xlaunch::watch
