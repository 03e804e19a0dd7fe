#include "watch/board.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <new>

#include "profile/step_clock.h"
#include "xlaunch/error.h"
#include "xlaunch/status/private_files.h"
#include "xlaunch/status/status_dir.h"

namespace xlaunch::watch {

int64_t now_ns() { return static_cast<int64_t>(profile::realtime_ns()); }

std::string board_path(const std::string& dir, int rank) { return status::progress_board_path(dir, rank); }

namespace {

void init_board(Board* b, int rank, int world) {
  new (b) Board{};
  b->rank = rank;
  b->world = world;
  b->pid = static_cast<int32_t>(getpid());
  gethostname(b->host, sizeof b->host - 1);
  for (auto& r : b->ring) r.seq.store(~uint64_t{0});
  b->magic = kBoardMagic;
}

}  // namespace

Board* create_board(const std::string& dir, int rank, int world) {
  std::string why;
  void* p = files::map_new_file(board_path(dir, rank), sizeof(Board), &why);
  if (!p) throw CommError("progress board on " + where_am_i() + ": " + why);
  auto* b = static_cast<Board*>(p);
  init_board(b, rank, world);
  return b;
}

const Board* open_peer_board(const std::string& dir, int rank) { return status::map_board(dir, rank); }

Board* private_board() {
  static Board* b = [] {
    auto* mem = static_cast<Board*>(::operator new(sizeof(Board)));
    init_board(mem, 0, 1);
    return mem;
  }();
  return b;
}

}  // namespace xlaunch::watch
