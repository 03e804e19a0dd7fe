// A text file of lines that the JSONL and CSV backends append to, and whose tail a resumed
// process cuts. Appends are buffered in memory and written by flush() (no fsync: a crash of the
// machine may lose the last lines; a crash of the process mid-write leaves a last line without
// its newline, which the next process's keep_lines() drops). Every failure throws WriteError
// naming the path, what was being done and errno's text.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace xlaunch::track {

class LineFile {
 public:
  // Opens `path` for appending, creating it (O_APPEND|O_CREAT|O_CLOEXEC): a directory that cannot
  // be written is refused here, at init_trackers.
  explicit LineFile(std::string path);
  ~LineFile();
  LineFile(const LineFile&) = delete;
  LineFile& operator=(const LineFile&) = delete;

  const std::string& path() const { return path_; }
  // The complete lines the file holds, without their newlines: none for what is not a regular file
  // (/dev/full, a pipe), and never a torn last line. What append() buffered is not among them.
  std::vector<std::string> lines() const;
  // Buffers `text` (whole lines); writes the buffer once it passes 1 MiB, so that a writer that
  // never runs idle still holds a bounded amount in memory.
  void append(std::string_view text);
  void flush();
  // Flushes, then drops the lines `keep` refuses and a torn last line: the rest is written to a
  // temporary file beside this one, fsynced, renamed over it and the directory fsynced, so that a
  // crash leaves the old file or the new one; appends go to the new file from then on. Nothing is
  // rewritten when nothing is dropped. Returns how many lines were dropped (a torn one included).
  size_t keep_lines(const std::function<bool(std::string_view line)>& keep);

 private:
  std::string content() const;  // the whole file, "" when it is not a regular file

  std::string path_;
  int fd_ = -1;
  std::string buffer_;
};

}  // namespace xlaunch::track
