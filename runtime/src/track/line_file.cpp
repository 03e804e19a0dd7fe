#include "track/line_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "track/backend.h"

namespace xlaunch::track {
namespace {

constexpr size_t kWriteAtBytes = size_t{1} << 20;

[[noreturn]] void fail(const std::string& what, const std::string& path) {
  const int err = errno;
  throw WriteError(what + " " + path + ": " + std::strerror(err), err);
}

void write_all(int fd, std::string_view bytes, const std::string& path) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("cannot write " + std::to_string(bytes.size()) + " bytes to", path);
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

void fsync_dir_of(const std::string& path) {
  // By hand, not std::filesystem: the torch wheel's libtorch exports filesystem symbols of its own.
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail("cannot open the directory", dir);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  errno = err;
  if (rc != 0) fail("cannot fsync the directory", dir);
}

}  // namespace

LineFile::LineFile(std::string path) : path_(std::move(path)) {
  // Read and write: a resumed process reads what earlier ones wrote through the same descriptor.
  fd_ = ::open(path_.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
  if (fd_ < 0) fail("cannot open for appending", path_);
}

LineFile::~LineFile() {
  // Network file systems report a failed write-back at close: say so, since no caller is left.
  if (::close(fd_) != 0)
    std::fprintf(stderr, "[xlaunch] warning: tracking: closing %s: %s (its last lines may be lost)\n", path_.c_str(),
                 std::strerror(errno));
}

std::string LineFile::content() const {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) fail("cannot stat", path_);
  // A device (/dev/full reads as endless zeros) or a pipe holds no earlier lines to keep or cut.
  if (!S_ISREG(st.st_mode)) return {};
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::pread(fd_, bytes.data() + got, bytes.size() - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("cannot read", path_);
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  bytes.resize(got);
  return bytes;
}

std::vector<std::string> LineFile::lines() const {
  const std::string bytes = content();
  std::vector<std::string> out;
  size_t at = 0;
  for (size_t nl; (nl = bytes.find('\n', at)) != std::string::npos; at = nl + 1) out.push_back(bytes.substr(at, nl - at));
  return out;
}

void LineFile::append(std::string_view text) {
  buffer_.append(text);
  if (buffer_.size() >= kWriteAtBytes) flush();
}

void LineFile::flush() {
  if (buffer_.empty()) return;
  // Cleared even when the write fails: the backend stops then, and a retry would tear lines.
  std::string bytes;
  bytes.swap(buffer_);
  struct stat st {};
  const bool regular = ::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode);
  try {
    write_all(fd_, bytes, path_);
  } catch (const WriteError&) {
    // A write that failed part-way (a full disk) would leave a torn line that pandas cannot read:
    // cut the file back to the whole lines it held.
    if (regular && ::ftruncate(fd_, st.st_size) != 0)
      std::fprintf(stderr, "[xlaunch] warning: tracking: cannot cut %s back to its last whole line: %s\n",
                   path_.c_str(), std::strerror(errno));
    throw;
  }
}

size_t LineFile::keep_lines(const std::function<bool(std::string_view line)>& keep) {
  flush();
  const std::string bytes = content();
  std::string kept;
  size_t dropped = 0, at = 0;
  for (size_t nl; (nl = bytes.find('\n', at)) != std::string::npos; at = nl + 1) {
    const std::string_view line(bytes.data() + at, nl - at);
    if (keep(line)) {
      kept.append(line).push_back('\n');
    } else {
      ++dropped;
    }
  }
  if (at < bytes.size()) ++dropped;  // torn: no newline after it
  if (dropped == 0) return 0;

  const std::string tmp = path_ + ".tmp";
  const int fd = ::open(tmp.c_str(), O_RDWR | O_APPEND | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) fail("cannot create", tmp);
  try {
    struct stat st {};
    if (::fstat(fd_, &st) == 0) (void)::fchmod(fd, st.st_mode & 07777);  // keep the file's mode; best effort
    write_all(fd, kept, tmp);
    if (::fsync(fd) != 0) fail("cannot fsync", tmp);
    if (::rename(tmp.c_str(), path_.c_str()) != 0) fail("cannot rename " + tmp + " to", path_);
    fsync_dir_of(path_);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd_);
  fd_ = fd;  // the renamed file: appends go on after what was kept
  return dropped;
}

}  // namespace xlaunch::track
