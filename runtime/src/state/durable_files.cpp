#include "state/durable_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "xlaunch/error.h"

namespace xlaunch::durable {

void throw_io(const std::string& what, const fs::path& path) {
  throw Error(what + " " + path.string() + ": " + std::strerror(errno));
}

void write_all(int fd, const void* data, size_t size, const fs::path& path) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw_io("cannot write", path);
    p += n;
    size -= static_cast<size_t>(n);
  }
}

bool read_all_at(int fd, void* data, size_t size, uint64_t offset, const fs::path& path) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::pread(fd, p, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw_io("cannot read", path);
    if (n == 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return true;
}

void write_new_file(const fs::path& path, const std::function<void(int fd)>& fill, unsigned mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) throw_io("cannot create", path);
  try {
    fill(fd);
    if (::fsync(fd) != 0) throw_io("cannot fsync", path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0) throw_io("cannot close", path);
}

void write_new_file(const fs::path& path, const std::string& bytes, unsigned mode) {
  write_new_file(path, [&](int fd) { write_all(fd, bytes.data(), bytes.size(), path); }, mode);
}

void fsync_dir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw_io("cannot open directory", dir);
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) throw_io("cannot fsync directory", dir);
}

void rename_path(const fs::path& from, const fs::path& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) throw_io("cannot rename " + from.string() + " to", to);
}

std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return names;
  while (const dirent* e = ::readdir(d)) names.emplace_back(e->d_name);
  ::closedir(d);
  return names;
}

}  // namespace xlaunch::durable
