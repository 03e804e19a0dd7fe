#include "track/record_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "track/backend.h"
#include "track/crc32c.h"

namespace xlaunch::track {
namespace {

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::string reason(int err) { return std::to_string(err) + " " + std::strerror(err); }

}  // namespace

std::string frame_record(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  put_le(out, data.size(), 8);
  put_le(out, mask_crc(crc32c(out.data(), 8)), 4);
  out.append(data);
  put_le(out, mask_crc(crc32c(data.data(), data.size())), 4);
  return out;
}

RecordWriter::RecordWriter(std::string path)
    : fd_(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)), path_(std::move(path)), size_(0) {
  if (fd_ < 0) {
    const int err = errno;
    throw WriteError("cannot create " + path_ + ": errno " + reason(err), err);
  }
}

RecordWriter::RecordWriter(int fd, std::string path, uint64_t offset)
    : fd_(fd), path_(std::move(path)), size_(offset) {}

RecordWriter::~RecordWriter() { ::close(fd_); }

void RecordWriter::append(std::string_view data) { pending_ += frame_record(data); }

void RecordWriter::flush() {
  size_t done = 0;
  while (done < pending_.size()) {
    // pwrite at the offset we keep, so that a failure part-way leaves the file position alone and
    // the cut back below is the only repair needed.
    const ssize_t n = ::pwrite(fd_, pending_.data() + done, pending_.size() - done,
                               static_cast<off_t>(size_ + done));
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    const int err = n < 0 ? errno : EIO;  // 0 bytes for a non-empty write: it would never end
    std::string what = "cannot write " + std::to_string(pending_.size()) + " bytes to " + path_ +
                       " at offset " + std::to_string(size_) + ": errno " + reason(err);
    pending_.clear();
    if (done > 0 && ::ftruncate(fd_, static_cast<off_t>(size_)) != 0)
      what += " (and cutting it back to its last whole record failed: errno " + reason(errno) + ")";
    throw WriteError(what, err);
  }
  size_ += done;
  pending_.clear();
}

}  // namespace xlaunch::track
