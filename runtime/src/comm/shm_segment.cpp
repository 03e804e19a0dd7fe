#include "comm/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "xlaunch/error.h"

namespace xlaunch {

char* map_shm_segment(const std::string& name, size_t bytes, bool create) {
  const int fd = shm_open(name.c_str(), create ? (O_CREAT | O_EXCL | O_RDWR) : O_RDWR, 0600);
  if (fd < 0)
    throw CommError("shm_open(" + name + ") failed on " + where_am_i() + ": " + std::strerror(errno));
  if (create) {
    const int rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
    if (rc != 0) {
      close(fd);
      shm_unlink(name.c_str());
      throw CommError("cannot reserve " + std::to_string(bytes) + " bytes of shared memory for " + name + " on " +
                      where_am_i() + ": " + std::strerror(rc) + " (is /dev/shm large enough?)");
    }
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int mmap_errno = errno;
  close(fd);
  if (p == MAP_FAILED)
    throw CommError("mmap of " + name + " failed on " + where_am_i() + ": " + std::strerror(mmap_errno));
  return static_cast<char*>(p);
}

}  // namespace xlaunch
