#include "watch/board.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <new>

#include "xlaunch/error.h"

namespace xlaunch::watch {

int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

std::string board_path(const std::string& dir, int rank) { return dir + "/progress-" + std::to_string(rank); }

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
  const std::string path = board_path(dir, rank);
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) throw CommError("cannot create the progress board " + path + " on " + where_am_i() + ": " + std::strerror(errno));
  if (ftruncate(fd, sizeof(Board)) != 0) {
    const int e = errno;
    close(fd);
    throw CommError("cannot size the progress board " + path + ": " + std::strerror(e));
  }
  void* p = mmap(nullptr, sizeof(Board), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int e = errno;
  close(fd);
  if (p == MAP_FAILED) throw CommError("cannot map the progress board " + path + ": " + std::strerror(e));
  auto* b = static_cast<Board*>(p);
  init_board(b, rank, world);
  return b;
}

const Board* open_peer_board(const std::string& dir, int rank) {
  const std::string path = board_path(dir, rank);
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return nullptr;
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
      st.st_size < static_cast<off_t>(sizeof(Board))) {
    close(fd);
    return nullptr;
  }
  void* p = mmap(nullptr, sizeof(Board), PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return nullptr;
  const auto* b = static_cast<const Board*>(p);
  if (b->magic != kBoardMagic || b->rank != rank) {  // not (yet) a board: look again later
    munmap(p, sizeof(Board));
    return nullptr;
  }
  return b;
}

Board* private_board() {
  static Board* b = [] {
    auto* mem = static_cast<Board*>(::operator new(sizeof(Board)));
    init_board(mem, 0, 1);
    return mem;
  }();
  return b;
}

}  // namespace xlaunch::watch
