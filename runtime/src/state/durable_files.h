// Files written so that a crash leaves either nothing or the whole file under its name: new files
// only (never an existing one, never through a link), fsynced, and the directory fsynced after
// each new entry or rename. Shared by checkpoints (checkpoint_dir.h) and safetensors weights.
// Every failure throws xlaunch::Error naming the call's purpose, the path and errno's text.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace xlaunch::durable {

namespace fs = std::filesystem;

[[noreturn]] void throw_io(const std::string& what, const fs::path& path);

// Creates `path` (O_EXCL|O_NOFOLLOW, `mode` less the umask), lets `fill` write it through the
// descriptor, fsyncs and closes it. The descriptor is closed on every path out.
void write_new_file(const fs::path& path, const std::function<void(int fd)>& fill, unsigned mode = 0666);
void write_new_file(const fs::path& path, const std::string& bytes, unsigned mode = 0666);
// Writes all of `data` to fd (retrying short writes and EINTR).
void write_all(int fd, const void* data, size_t size, const fs::path& path);
// Reads `size` bytes at `offset` of fd into `data` (pread, retrying short reads and EINTR). False
// when the file ends first (the caller says what that means); Error naming `path` on a failure.
bool read_all_at(int fd, void* data, size_t size, uint64_t offset, const fs::path& path);

// A rename or a new entry is durable only once its directory is fsynced.
void fsync_dir(const fs::path& dir);
void rename_path(const fs::path& from, const fs::path& to);

// A test hook on the steps of a save ("wrote <file>", "renamed ...": each writer names its own),
// so that tests can kill the process right there and show that nothing is lost. Empty: none.
class SaveHook {
 public:
  void set(std::function<void(const std::string& event)> fn) { fn_ = std::move(fn); }
  void operator()(const std::string& event) const {
    if (fn_) fn_(event);
  }

 private:
  std::function<void(const std::string&)> fn_;
};

// The names in `dir` ("." and ".." included); empty when it cannot be opened.
std::vector<std::string> entries(const fs::path& dir);

}  // namespace xlaunch::durable
