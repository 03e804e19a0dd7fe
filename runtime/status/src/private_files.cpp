#include "xlaunch/status/private_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <vector>

namespace xlaunch::files {
namespace {

std::string errno_text() { return std::strerror(errno); }

// 16 hex digits from the kernel's random pool: not guessable from the pid or the time.
std::string random_suffix() {
  unsigned long long v = 0;
  if (getrandom(&v, sizeof v, 0) != static_cast<ssize_t>(sizeof v)) v ^= static_cast<unsigned long long>(getpid());
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", v);
  return buf;
}

bool write_all(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

std::string describe_owner(uid_t uid) {
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* found = nullptr;
  std::string text = "uid " + std::to_string(uid);
  if (getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found) text += std::string(" (") + pw.pw_name + ")";
  return text;
}

std::string parent_problem(const std::string& dir) {
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0) return dir + ": " + errno_text();
  if (!S_ISDIR(st.st_mode)) return dir + " is not a directory";
  if (st.st_uid != geteuid() && st.st_uid != 0)
    return dir + " belongs to " + describe_owner(st.st_uid) + ", not to this user (" + describe_owner(geteuid()) +
           "): its owner could replace what xlaunch creates there";
  if ((st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX)) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return dir + " may be written by every user (mode " + mode +
           ") and is not sticky like /tmp: they could replace what xlaunch creates there";
  }
  return "";
}

std::string make_private_dir(const std::string& parent, const std::string& prefix, std::string* why) {
  if (std::string p = parent_problem(parent); !p.empty()) {
    *why = p;
    return "";
  }
  std::string tmpl = parent + "/" + prefix + "XXXXXX";
  if (!mkdtemp(tmpl.data())) {
    *why = "cannot create a directory in " + parent + ": " + errno_text();
    return "";
  }
  return tmpl;
}

int open_private_dir(const std::string& dir, std::string* why) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    *why = errno == ELOOP || errno == ENOTDIR ? dir + " is a symbolic link or not a directory" : dir + ": " + errno_text();
    return -1;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_uid != geteuid() || (st.st_mode & S_IWOTH)) {
    *why = st.st_uid != geteuid()
               ? dir + " belongs to " + describe_owner(st.st_uid) + ", not to this user (" + describe_owner(geteuid()) + ")"
               : dir + " may be written by every user";
    close(fd);
    return -1;
  }
  return fd;
}

bool write_private_file(int dirfd, const std::string& name, const std::string& bytes, std::string* why) {
  const std::string tmp = "." + name + "." + random_suffix();
  const int fd = openat(dirfd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    *why = "cannot create " + tmp + ": " + errno_text();
    return false;
  }
  const bool written = write_all(fd, bytes);
  const int write_errno = errno;
  close(fd);
  if (!written || renameat(dirfd, tmp.c_str(), dirfd, name.c_str()) != 0) {
    *why = "cannot write " + name + ": " + std::strerror(written ? errno : write_errno);
    unlinkat(dirfd, tmp.c_str(), 0);
    return false;
  }
  return true;
}

std::optional<std::string> read_private_file(int dirfd, const std::string& name, size_t max_bytes) {
  const int fd = openat(dirfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st {};
  std::optional<std::string> out;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
      static_cast<size_t>(st.st_size) <= max_bytes) {
    std::string text(static_cast<size_t>(st.st_size), '\0');
    size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = read(fd, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    if (done == text.size()) out = std::move(text);
  }
  close(fd);
  return out;
}

void* map_new_file(const std::string& path, size_t bytes, std::string* why) {
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    *why = "cannot create " + path + ": " + errno_text();
    return nullptr;
  }
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int e = errno;
    *why = "cannot size " + path + ": " + std::strerror(e);
    close(fd);
    errno = e;
    return nullptr;
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int e = errno;
  close(fd);
  if (p == MAP_FAILED) {
    *why = "cannot map " + path + ": " + std::strerror(e);
    errno = e;
    return nullptr;
  }
  return p;
}

const void* map_own_file(const std::string& path, size_t bytes) {
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return nullptr;
  struct stat st {};
  void* p = MAP_FAILED;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() && st.st_size == static_cast<off_t>(bytes))
    p = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  return p == MAP_FAILED ? nullptr : p;
}

bool make_dirs(const std::string& dir, std::string* why) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) *why = "cannot create directory " + dir + ": " + ec.message();
  return !ec;
}

std::vector<std::string> list_private_dir(int dirfd) {
  std::vector<std::string> names;
  const int listing = dup(dirfd);  // closedir closes the descriptor it reads; dirfd stays the caller's
  DIR* d = listing >= 0 ? fdopendir(listing) : nullptr;
  if (!d) {
    if (listing >= 0) close(listing);
    return names;
  }
  while (const dirent* e = readdir(d))
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
  closedir(d);
  return names;
}

void remove_private_dir(const std::string& dir) {
  std::string why;
  const int fd = open_private_dir(dir, &why);
  if (fd < 0) return;
  for (const auto& n : list_private_dir(fd)) {
    struct stat st {};
    if (fstatat(fd, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_uid == geteuid() && !S_ISDIR(st.st_mode))
      unlinkat(fd, n.c_str(), 0);
  }
  close(fd);
  rmdir(dir.c_str());
}

}  // namespace xlaunch::files
