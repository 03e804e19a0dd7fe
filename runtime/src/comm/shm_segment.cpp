#include "comm/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "xlaunch/error.h"
#include "xlaunch/status/private_files.h"

namespace xlaunch {
namespace {

std::function<uint64_t()>& nonce_source() {
  static std::function<uint64_t()> source;
  return source;
}

uint64_t draw_nonce() {
  if (nonce_source()) return nonce_source()();
  uint64_t v = 0;
  if (getrandom(&v, sizeof v, 0) != static_cast<ssize_t>(sizeof v))
    throw CommError(std::string("getrandom failed on ") + where_am_i() + ": " + std::strerror(errno));
  return v;
}

char* map_fd(int fd, const std::string& name, size_t bytes, bool created) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int mmap_errno = errno;
  close(fd);
  if (p == MAP_FAILED) {
    if (created) shm_unlink(name.c_str());  // its pages would hold /dev/shm until reboot
    throw CommError("mmap of " + name + " failed on " + where_am_i() + ": " + std::strerror(mmap_errno));
  }
  return static_cast<char*>(p);
}

// Who holds a segment that is in the way, for the warning ("uid 0 (root)").
std::string holder_of(const std::string& name) {
  struct stat st {};
  if (stat(("/dev/shm" + name).c_str(), &st) != 0) return "its owner unknown";
  return "owned by " + files::describe_owner(st.st_uid);
}

}  // namespace

std::string shm_segment_name(const std::string& prefix, uint64_t nonce) {
  char hex[20];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(nonce));
  return prefix + "-" + hex;
}

void set_shm_nonce_source(std::function<uint64_t()> source) { nonce_source() = std::move(source); }

NewShmSegment create_shm_segment(const std::string& prefix, size_t bytes) {
  constexpr int kTries = 8;
  for (int attempt = 1;; ++attempt) {
    NewShmSegment seg;
    seg.nonce = draw_nonce();
    const std::string name = shm_segment_name(prefix, seg.nonce);
    const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 && errno == EEXIST && attempt < kTries) {
      std::fprintf(stderr,
                   "xlaunch: warning: shared-memory segment %s exists already on %s (%s; a stale job's, or "
                   "planted): not reusing it, trying another name\n",
                   name.c_str(), where_am_i().c_str(), holder_of(name).c_str());
      continue;
    }
    if (fd < 0) {
      const int e = errno;
      throw CommError("shm_open(" + name + ") failed on " + where_am_i() + ": " + std::strerror(e) +
                      (e == EEXIST ? " (" + std::to_string(kTries) + " random names in a row were taken)" : ""));
    }
    const int rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
    if (rc != 0) {
      close(fd);
      shm_unlink(name.c_str());
      throw CommError("cannot reserve " + std::to_string(bytes) + " bytes of shared memory for " + name + " on " +
                      where_am_i() + ": " + std::strerror(rc) + " (is /dev/shm large enough?)");
    }
    seg.map = map_fd(fd, name, bytes, true);
    return seg;
  }
}

char* open_shm_segment(const std::string& name, size_t bytes) {
  const int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) {
    const int e = errno;
    throw CommError("shm_open(" + name + ") failed on " + where_am_i() + ": " + std::strerror(e));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_uid != geteuid() || st.st_size < static_cast<off_t>(bytes)) {
    close(fd);
    throw CommError("shared-memory segment " + name + " on " + where_am_i() + " is not this user's segment of " +
                    std::to_string(bytes) + " bytes (" + holder_of(name) + "); not using it");
  }
  return map_fd(fd, name, bytes, false);
}

}  // namespace xlaunch
