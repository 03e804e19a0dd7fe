#include "watch/job_watch.h"

#include <mpi.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "profile/trace.h"
#include "watch/board.h"
#include "watch/watchdog.h"
#include "xlaunch/env_vars.h"
#include "xlaunch/error.h"
#include "xlaunch/status/private_files.h"
#include "xlaunch/status/status_dir.h"

namespace xlaunch::watch {
namespace {

std::string g_private_dir;  // set when rank 0 made the directory

// Rank 0's private directory, on every rank ("" when rank 0 could not make one).
std::string shared_private_dir(int rank) {
  char path[4096] = {};
  if (rank == 0) {
    std::string why;
    const std::string dir = files::make_private_dir(status::temp_dir(), "xlaunch-watch-", &why);
    if (dir.empty()) std::fprintf(stderr, "xlaunch: warning: %s; progress boards stay private to each rank\n", why.c_str());
    if (dir.size() < sizeof path) std::memcpy(path, dir.c_str(), dir.size());
  }
  MPI_Bcast(path, sizeof path, MPI_CHAR, 0, MPI_COMM_WORLD);
  return path;
}

bool private_dir_ok(const std::string& dir, std::string* why) {
  const int fd = files::open_private_dir(dir, why);
  if (fd >= 0) close(fd);
  return fd >= 0;
}

}  // namespace

void start_job_watch(int rank, int world) {
  Settings s;
  s.rank = rank;
  s.world = world;
  s.timeout_s = static_cast<double>(env::get_int(env::kTimeoutS));
  if (s.timeout_s < 0) throw env::bad_value(env::kTimeoutS, env::raw(env::kTimeoutS), "a number of seconds >= 0");
  if (s.timeout_s == 0) return disable(s);
  s.debug = env::get_bool(env::kDebug);
  s.dir = env::get_string(env::kStatusDir);
  if (s.dir.empty()) {
    s.dir = shared_private_dir(rank);
    g_private_dir = s.dir;
  } else if (std::string why; access(s.dir.c_str(), F_OK) != 0) {
    s.dir.clear();  // a machine that does not see the status directory (no shared log_dir)
  } else if (!private_dir_ok(s.dir, &why)) {
    // Boards and the verdict go only where nobody else can plant or read them (docs/security.md).
    std::fprintf(stderr, "xlaunch: warning: %s=%s is refused: %s; this rank's progress is visible to itself only\n",
                 env::kStatusDir.name, s.dir.c_str(), why.c_str());
    s.dir.clear();
  }
  try {
    start(s);
  } catch (const CommError& e) {
    std::fprintf(stderr, "xlaunch: warning: %s; this rank's progress is visible to itself only\n", e.what());
    s.dir.clear();
    g_private_dir.clear();
    start(s);
  }
  MPI_Barrier(MPI_COMM_WORLD);  // every board exists
  open_peer_boards();
}

void install_exit_hook() {
  on_exit(
      [](int status, void*) {
        profile::trace::write();  // before a failing rank's _exit skips the atexit handlers
        if (record_exit(status)) {
          std::fflush(nullptr);
          _exit(status);
        }
      },
      nullptr);
}

void remove_own_board() {
  if (!g_private_dir.empty()) unlink(board_path(g_private_dir, settings().rank).c_str());
}

void remove_private_dir() {
  if (!g_private_dir.empty() && settings().rank == 0) rmdir(g_private_dir.c_str());
}

}  // namespace xlaunch::watch
