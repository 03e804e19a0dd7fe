// TFRecord framing, the container of TensorBoard's event files, and a writer that appends framed
// records to a file. One record on disk:
//
//   uint64 length (little endian) | uint32 mask_crc(crc32c of those 8 bytes) | data | uint32 mask_crc(crc32c of data)
//
// (the uint32s little endian too; crc32c.h). A reader checks both checksums, so a record torn by
// a crash is detected, never misread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace xlaunch::track {

// The bytes of one record holding `data`.
std::string frame_record(std::string_view data);

// Appends records to one file. Records are buffered and reach the file only at flush(), whole: a
// flush that fails cuts the file back to its length before that flush, so that the file only ever
// holds whole records, whatever failed. Not thread-safe: one writer thread.
class RecordWriter {
 public:
  // Creates `path` (O_CREAT | O_EXCL: never an existing file) and writes to it; throws WriteError
  // naming the path and the reason when it cannot (a directory that is not writable, a name
  // taken).
  explicit RecordWriter(std::string path);
  // Writes to `fd`, already open for writing at offset `offset`, and closes it at destruction;
  // `path` names it in messages.
  RecordWriter(int fd, std::string path, uint64_t offset = 0);
  // Closes the file. What append() buffered after the last flush() is dropped: the owner flushes.
  ~RecordWriter();
  RecordWriter(const RecordWriter&) = delete;
  RecordWriter& operator=(const RecordWriter&) = delete;

  // Buffers one record (framed here).
  void append(std::string_view data);
  // write(2)s what is buffered (short writes and EINTR continued; no fsync). A write that fails
  // throws WriteError with the path, errno and its text (ENOSPC: the disk is full); the buffered
  // records are dropped and the file cut back to the records of earlier flushes.
  void flush();

  const std::string& path() const { return path_; }
  // The bytes handed to the file so far: whole records only.
  uint64_t size() const { return size_; }

 private:
  int fd_;
  std::string path_;
  uint64_t size_;
  std::string pending_;
};

}  // namespace xlaunch::track
