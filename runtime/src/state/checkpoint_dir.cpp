#include "state/checkpoint_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <algorithm>
#include <atomic>
#include <set>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <sstream>
#include <vector>

#include "state/durable_files.h"
#include "xlaunch/error.h"
#include "xlaunch/status/private_files.h"

namespace fs = std::filesystem;

namespace xlaunch {
namespace checkpoint {
namespace {

durable::SaveHook notify;  // set_save_hook
durable::SaveHook notify_read;  // set_load_hook
std::function<bool(int)> refuse_shared;  // set_shared_dir_hook

using durable::fsync_dir;
using durable::rename_path;
using durable::throw_io;

// Always a new file (O_EXCL|O_NOFOLLOW): never an existing one, never through a link.
void write_file(const fs::path& path, const std::string& bytes) { durable::write_new_file(path, bytes, 0644); }

// Our own, not std::filesystem::remove_all: libtorch.so exports a copy of it that crashes when
// the program's libstdc++ calls resolve to it. Missing is fine.
void remove_tree(const fs::path& path) {
  if (::access(path.c_str(), F_OK) != 0) return;
  const auto remove_one = [](const char* p, const struct stat*, int, struct FTW*) { return ::remove(p); };
  if (::nftw(path.c_str(), remove_one, 16, FTW_DEPTH | FTW_PHYS) != 0) throw_io("cannot remove", path);
}

bool is_empty_dir(const fs::path& path) {
  DIR* d = ::opendir(path.c_str());
  if (!d) return false;
  int entries = 0;
  while (const dirent* e = ::readdir(d))
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) ++entries;
  ::closedir(d);
  return entries == 0;
}

// A regular file of this user's (not a link, not someone else's), whole.
std::string read_file(const fs::path& path) {
  if (auto bytes = files::read_private_file(AT_FDCWD, path.string(), std::numeric_limits<size_t>::max()))
    return std::move(*bytes);
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) throw_io("cannot open", path);
  if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid())
    throw UsageError("load_state: " + path.string() + " is not a regular file of this user's (" +
                     files::describe_owner(::geteuid()) + "); a checkpoint is read only from files its user wrote");
  throw_io("cannot read", path);
}

uint32_t crc32_of(const std::string& bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  size_t done = 0;
  while (done < bytes.size()) {  // zlib takes 32-bit lengths
    const uInt n = static_cast<uInt>(std::min<size_t>(bytes.size() - done, 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + done), n);
    done += n;
  }
  return static_cast<uint32_t>(crc);
}

fs::path normalized(const std::string& dir) {
  if (dir.empty()) throw UsageError("checkpoint directory is empty; pass a path such as \"checkpoints/last\"");
  fs::path p = fs::path(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();  // "ckpt/" -> "ckpt"
  return p;
}

fs::path sibling(const fs::path& dir, const char* suffix) { return fs::path(dir.string() + suffix); }

std::string hex_crc(uint32_t crc) {
  char text[16];
  std::snprintf(text, sizeof text, "%08x", crc);
  return text;
}

std::string manifest_line(const std::string& path, const std::string& bytes) {
  return hex_crc(crc32_of(bytes)) + " " + std::to_string(bytes.size()) + " " + path + "\n";
}

// The process's umask, without changing it (umask(2) would, for every thread, for a moment).
mode_t current_umask() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key)
    if (key == "Umask:") {
      std::string octal;
      status >> octal;
      return static_cast<mode_t>(std::stoul(octal, nullptr, 8));
    }
  return 022;
}

// save_state replaces <dir> and <dir>.old by rename and removes them: refused when either is a
// link (the rename would replace the link, not write where it points) or another user's.
void check_replaceable(const fs::path& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return;  // missing: nothing to replace
  if (S_ISLNK(st.st_mode))
    throw UsageError("save_state: " + path.string() + " is a symbolic link; a save replaces the checkpoint " +
                     "directory by rename, which would replace the link instead of writing where it points. " +
                     "Pass the directory it points to");
  if (st.st_uid != ::geteuid())
    throw UsageError("save_state: " + path.string() + " belongs to " + files::describe_owner(st.st_uid) +
                     ", not to this user (" + files::describe_owner(::geteuid()) + "); xlaunch does not replace " +
                     "another user's files. Choose a checkpoint directory of your own");
}

// Refused: a parent anyone may write to without the sticky bit (anyone could swap the checkpoint).
void check_parent(const fs::path& parent) {
  struct stat st {};
  if (::stat(parent.c_str(), &st) == 0 && (st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX))
    throw UsageError("save_state: " + parent.string() + " may be written by every user and is not sticky like " +
                     "/tmp: anyone could replace the checkpoint there. Choose a directory of your own");
}

// Temporaries of saves that were killed: <dir>.tmp-XXXXXX (and <dir>.tmp, from older versions),
// this user's only.
void remove_stale_temporaries(const fs::path& parent, const fs::path& dir) {
  const std::string base = dir.filename().string() + ".tmp";
  DIR* d = ::opendir(parent.c_str());
  if (!d) return;
  std::vector<fs::path> stale;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    struct stat st {};
    if ((name == base || (name.rfind(base + "-", 0) == 0 && name.size() == base.size() + 7)) &&
        ::lstat((parent / name).c_str(), &st) == 0 && st.st_uid == ::geteuid())
      stale.push_back(parent / name);
  }
  ::closedir(d);
  for (const auto& p : stale) remove_tree(p);
}

// Makes the directories of `path` under `tmp` that are missing (another rank may be making them at
// the same moment: one that exists as a directory is fine; anything else there is refused).
void make_parents(const fs::path& tmp, const std::string& path) {
  fs::path sub = tmp;
  for (const auto& part : fs::path(path).parent_path()) {
    sub /= part;
    if (::mkdir(sub.c_str(), 0755) == 0) continue;
    struct stat st {};
    if (errno != EEXIST || ::lstat(sub.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) throw_io("cannot create", sub);
  }
}

}  // namespace

namespace {

constexpr const char* kBlockCrcMagic = "xlaunch-block-crc32";
std::atomic<uint64_t> g_block_bytes{1u << 20};
thread_local uint64_t t_bytes_read = 0;

bool ends_with(const std::string& s, const std::string& end) {
  return s.size() > end.size() && s.compare(s.size() - end.size(), end.size(), end) == 0;
}

}  // namespace

bool reads_by_range(const std::string& path) {
  return path.rfind("model_", 0) == 0 && path.find("/rank_") != std::string::npos && ends_with(path, ".safetensors");
}

std::string block_crc_path(const std::string& path) { return path + ".crc32"; }

void set_crc_block_bytes(uint64_t bytes) { g_block_bytes = std::clamp<uint64_t>(bytes, 1, 1u << 30); }

BlockCrcs parse_block_crcs(const std::string& text, const std::string& where) {
  std::istringstream in(text);
  std::string magic;
  BlockCrcs out;
  in >> magic >> out.block >> out.size;
  const auto damaged = [&](const std::string& why) {
    return UsageError("load_state: " + where + " is not a list of block CRC32s (" + why +
                      "); the checkpoint is damaged: resume from another checkpoint");
  };
  if (!in || magic != kBlockCrcMagic || out.block == 0) throw damaged("its first line is not '" + std::string(kBlockCrcMagic) + " <block bytes> <file bytes>'");
  for (std::string crc; in >> crc;) {
    if (crc.size() != 8 || crc.find_first_not_of("0123456789abcdef") != std::string::npos) throw damaged("'" + crc + "' is not a CRC32");
    out.crcs.push_back(static_cast<uint32_t>(std::stoul(crc, nullptr, 16)));
  }
  if (out.crcs.size() != (out.size + out.block - 1) / out.block) throw damaged("the count of blocks does not fit the size");
  return out;
}

std::string write_part(const std::string& tmp, const std::string& path, const std::string& bytes) {
  make_parents(tmp, path);
  write_file(fs::path(tmp) / path, bytes);
  notify("wrote " + path);
  if (!reads_by_range(path)) return manifest_line(path, bytes);
  // One pass: each block's CRC32, and the whole file's combined from them.
  const uint64_t block = g_block_bytes.load();
  std::string crcs = std::string(kBlockCrcMagic) + " " + std::to_string(block) + " " + std::to_string(bytes.size()) + "\n";
  uLong whole = crc32(0L, Z_NULL, 0);
  for (uint64_t at = 0; at < bytes.size(); at += block) {
    const uint64_t n = std::min<uint64_t>(block, bytes.size() - at);
    uLong crc = crc32(0L, Z_NULL, 0);
    for (uint64_t done = 0; done < n;) {  // zlib takes 32-bit lengths
      const uInt k = static_cast<uInt>(std::min<uint64_t>(n - done, 1u << 30));
      crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + at + done), k);
      done += k;
    }
    whole = crc32_combine(whole, crc, static_cast<z_off_t>(n));
    crcs += hex_crc(static_cast<uint32_t>(crc)) + "\n";
  }
  const std::string side = block_crc_path(path);
  write_file(fs::path(tmp) / side, crcs);
  notify("wrote " + side);
  return hex_crc(static_cast<uint32_t>(whole)) + " " + std::to_string(bytes.size()) + " " + path + "\n" +
         manifest_line(side, crcs);
}

PendingCheckpoint::PendingCheckpoint(const std::string& dir_text) {
  const fs::path dir = normalized(dir_text), old = sibling(dir, ".old");
  const fs::path parent = dir.has_parent_path() ? dir.parent_path() : fs::path(".");
  fs::create_directories(parent);
  check_parent(parent);
  check_replaceable(dir);
  check_replaceable(old);
  if (fs::exists(dir) && !fs::exists(dir / "MANIFEST") && !is_empty_dir(dir))
    throw UsageError("save_state: " + dir.string() + " exists and is not an xlaunch checkpoint (no MANIFEST); "
                     "it would be replaced. Choose another directory, or remove it");
  // One save into <dir> at a time: before anything there is removed or written. The lock file
  // goes when the save ends; one that was replaced meanwhile is not ours to trust.
  lock_ = parent / ("." + dir.filename().string() + ".lock");
  lock_fd_ = ::open(lock_.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (lock_fd_ < 0) throw_io("cannot open the lock file", lock_);
  struct stat held {}, now {};
  const bool mine = ::fstat(lock_fd_, &held) == 0 && held.st_uid == ::geteuid();
  const bool locked = mine && ::flock(lock_fd_, LOCK_EX | LOCK_NB) == 0;
  const bool same = locked && ::stat(lock_.c_str(), &now) == 0 && now.st_ino == held.st_ino && now.st_dev == held.st_dev;
  if (!same) {
    ::close(lock_fd_);
    lock_fd_ = -1;
    if (!mine)
      throw UsageError("save_state: " + lock_ + " is not this user's; xlaunch does not share a lock with "
                       "another user. Choose a checkpoint directory of your own");
    throw UsageError("save_state: another save is writing " + dir.string() + " (it holds " + lock_ +
                     "): a background save of this job not yet complete, or another job saving into the same "
                     "directory. Wait for it (acc.wait_for_checkpoint()), or give each job its own directory");
  }
  try {
    remove_stale_temporaries(parent, dir);
    // A new directory of this user's next to <dir> (mkdtemp: a random name, never one that exists).
    std::string tmpl = dir.string() + ".tmp-XXXXXX";
    if (!::mkdtemp(tmpl.data())) throw_io("cannot create a directory next to", dir);
    tmp_ = tmpl;
  } catch (...) {
    release_lock();
    throw;
  }
  dir_ = dir.string();
}

void PendingCheckpoint::release_lock() {
  if (lock_fd_ < 0) return;
  ::unlink(lock_.c_str());  // while still held: whoever opens it next makes a new one
  ::close(lock_fd_);
  lock_fd_ = -1;
}

PendingCheckpoint::~PendingCheckpoint() {
  if (!committed_) {
    try {
      remove_tree(tmp_);
    } catch (const std::exception& e) {
      std::cerr << "[xlaunch] warning: could not remove the unfinished checkpoint " << tmp_ << ": " << e.what()
                << " (the next save removes it)" << std::endl;
    }
  }
  release_lock();
}

void PendingCheckpoint::write(const std::string& path, const std::string& bytes) { add_lines(write_part(tmp_, path, bytes)); }

void PendingCheckpoint::add_lines(const std::string& lines) {
  std::istringstream in(lines);
  for (std::string line; std::getline(in, line);) {
    const size_t second = line.find(' ', line.find(' ') + 1);
    if (second == std::string::npos) throw Error("save_state: a malformed MANIFEST line '" + line + "' (internal)");
    lines_[line.substr(second + 1)] = line + "\n";
  }
}

void PendingCheckpoint::commit() {
  const fs::path dir = dir_, tmp = tmp_, old = sibling(dir, ".old");
  const fs::path parent = dir.has_parent_path() ? dir.parent_path() : fs::path(".");
  std::string manifest = "xlaunch-checkpoint " + std::to_string(kFormatVersion) + "\n";
  std::set<fs::path> dirs{tmp};
  for (const auto& [path, line] : lines_) {
    manifest += line;
    for (fs::path sub = fs::path(path).parent_path(); !sub.empty(); sub = sub.parent_path()) dirs.insert(tmp / sub);
  }
  write_file(tmp / "MANIFEST", manifest);
  notify("wrote MANIFEST");
  for (const auto& d : dirs) fsync_dir(d);
  if (::chmod(tmp.c_str(), 0777 & ~current_umask()) != 0) throw_io("cannot set the mode of", tmp);
  fsync_dir(parent);
  // Directories cannot replace each other in one rename: move the previous checkpoint aside
  // first. In between, <dir> is missing and <dir>.old is complete; read_verified falls back to it.
  // When <dir> is already missing, <dir>.old is the last complete checkpoint: keep it until the
  // new one is in place.
  if (fs::exists(dir)) {
    remove_tree(old);
    rename_path(dir, old);
    fsync_dir(parent);
    notify("moved previous aside");
  }
  rename_path(tmp, dir);
  committed_ = true;
  fsync_dir(parent);
  notify("moved new into place");
  remove_tree(old);
  fsync_dir(parent);
}

void set_save_hook(std::function<void(const std::string&)> hook) { notify.set(std::move(hook)); }

void set_shared_dir_hook(std::function<bool(int rank)> refuse) { refuse_shared = std::move(refuse); }

bool shared_dir_refused(int rank) { return refuse_shared && refuse_shared(rank); }

void remove_directory(const std::string& path) { remove_tree(path); }

void write_atomically(const std::string& dir, const Files& files) {
  PendingCheckpoint pending(dir);
  for (const auto& [path, bytes] : files) pending.write(path, bytes);
  pending.commit();
}

bool is_rank_file(const std::string& path) {
  const auto ends_with = [&](const std::string& end) {
    return path.size() > end.size() && path.compare(path.size() - end.size(), end.size(), end) == 0;
  };
  if (ends_with(".safetensors")) return path.rfind("model_", 0) == 0 && path.find("/rank_") != std::string::npos;
  return ends_with(".pt") &&
         (path.rfind("rng/", 0) == 0 || path.rfind("ddp/", 0) == 0 || path.find("/rank_") != std::string::npos);
}

std::map<std::string, ManifestEntry> parse_manifest(const std::string& text, const std::string& where) {
  std::istringstream manifest(text);
  std::string magic;
  int version = 0;
  manifest >> magic >> version;
  if (magic != "xlaunch-checkpoint" || version != kFormatVersion)
    throw UsageError("load_state: " + where + " is not an xlaunch checkpoint manifest of format " +
                     std::to_string(kFormatVersion) + " (it starts with '" + magic + " " + std::to_string(version) +
                     "')");
  std::map<std::string, ManifestEntry> out;
  std::string crc, path;
  size_t size = 0;
  while (manifest >> crc >> size >> path) out[path] = ManifestEntry{crc, size};
  if (!manifest.eof())
    throw UsageError("load_state: " + where + " is corrupt (a line is not 'crc32 bytes path')");
  return out;
}

namespace {

UsageError corrupt_part(const std::string& dir, const fs::path& file, size_t size, const std::string& crc,
                        const ManifestEntry& entry) {
  return UsageError("load_state: checkpoint " + dir + " is corrupt: " + file.string() + " has " + std::to_string(size) +
                    " bytes, CRC32 " + crc + "; its MANIFEST says " + std::to_string(entry.size) + " bytes, CRC32 " +
                    entry.crc);
}

}  // namespace

std::string read_part(const std::string& dir, const std::string& path, const ManifestEntry& entry) {
  const fs::path file = fs::path(dir) / path;
  if (!fs::exists(file))
    throw UsageError("load_state: checkpoint " + dir + " is corrupt: " + file.string() + " is missing");
  std::string bytes = read_file(file);
  const std::string crc = hex_crc(crc32_of(bytes));
  if (bytes.size() != entry.size || entry.crc != crc) throw corrupt_part(dir, file, bytes.size(), crc, entry);
  notify_read("read " + path);
  return bytes;
}

PartReader::PartReader(const std::string& dir, const std::string& path, const ManifestEntry& entry,
                       const BlockCrcs* blocks)
    : dir_(dir), path_(path), file_((fs::path(dir) / path).string()) {
  fd_ = ::open(file_.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd_ < 0)
    throw UsageError("load_state: checkpoint " + dir + " is corrupt: cannot open " + file_ + " (" +
                     std::strerror(errno) + ")");
  try {
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode))
      throw UsageError("load_state: checkpoint " + dir + " is corrupt: " + file_ + " is not a regular file");
    size_ = static_cast<uint64_t>(st.st_size);
    device_ = static_cast<uint64_t>(st.st_dev);
    inode_ = static_cast<uint64_t>(st.st_ino);
    if (blocks) {  // checked block by block as read_at reaches them
      if (size_ != entry.size || blocks->size != entry.size)
        throw UsageError("load_state: checkpoint " + dir + " is corrupt: " + file_ + " has " + std::to_string(size_) +
                         " bytes; its MANIFEST says " + std::to_string(entry.size) + " and " + block_crc_path(path) +
                         " " + std::to_string(blocks->size));
      block_ = blocks->block;
      block_crcs_ = blocks->crcs;
      checked_.assign(block_crcs_.size(), false);
      notify_read("read " + path);
      return;
    }
    std::vector<char> block(4u << 20);
    uLong crc = crc32(0L, Z_NULL, 0);
    for (uint64_t at = 0; at < size_;) {
      const uint64_t n = std::min<uint64_t>(block.size(), size_ - at);
      read_raw(at, n, block.data());
      crc = crc32(crc, reinterpret_cast<const Bytef*>(block.data()), static_cast<uInt>(n));
      at += n;
    }
    const std::string text = hex_crc(static_cast<uint32_t>(crc));
    if (size_ != entry.size || entry.crc != text) throw corrupt_part(dir, file_, size_, text, entry);
    notify_read("read " + path);
  } catch (...) {
    close();
    throw;
  }
}

PartReader::~PartReader() { close(); }

void PartReader::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void PartReader::read_raw(uint64_t offset, uint64_t length, void* dst) {
  if (fd_ < 0) {
    fd_ = ::open(file_.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat st {};
    if (fd_ < 0 || ::fstat(fd_, &st) != 0 || static_cast<uint64_t>(st.st_dev) != device_ ||
        static_cast<uint64_t>(st.st_ino) != inode_ || static_cast<uint64_t>(st.st_size) != size_) {
      close();
      throw UsageError("load_state: " + file_ + " is no longer the file that was checked (was the checkpoint "
                       "replaced by a save while it was being read?); read it again once no save writes there");
    }
  }
  if (!durable::read_all_at(fd_, dst, length, offset, file_))
    throw UsageError("load_state: " + file_ + " ended early, before byte " + std::to_string(offset + length) +
                     " (was it truncated while being read?)");
  bytes_read_ += length;
  t_bytes_read += length;
}

uint64_t bytes_read_in_place_on_this_thread() { return t_bytes_read; }

void PartReader::read_at(uint64_t offset, uint64_t length, void* dst) {
  if (block_ == 0) return read_raw(offset, length, dst);
  if (offset + length > size_)
    throw UsageError("load_state: a read of bytes " + std::to_string(offset) + " to " + std::to_string(offset + length) +
                     " of " + file_ + ", which has " + std::to_string(size_) + " (internal)");
  char* out = static_cast<char*>(dst);
  const auto check = [&](uint64_t b, const char* bytes, uint64_t n) {
    if (checked_[b]) return;
    const uint32_t crc =
        static_cast<uint32_t>(crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(bytes), static_cast<uInt>(n)));
    if (crc != block_crcs_[b])
      throw UsageError("load_state: checkpoint " + dir_ + " is corrupt: bytes " + std::to_string(b * block_) + " to " +
                       std::to_string(b * block_ + n) + " of " + file_ + " have CRC32 " + hex_crc(crc) + "; its " +
                       block_crc_path(path_) + " says " + hex_crc(block_crcs_[b]) + ". Resume from another checkpoint");
    checked_[b] = true;
  };
  for (uint64_t b = offset / block_; length > 0; ++b) {
    const uint64_t begin = b * block_, end = std::min(size_, begin + block_);
    const uint64_t n = std::min(end, offset + length) - offset;  // of this block, asked for
    if (b != cached_ && n == end - begin) {  // the whole block: straight into place
      read_raw(begin, n, out);
      check(b, out, n);
    } else {
      // Part of it: the block is read whole (and checked), and kept for the next range, which in
      // a sequential reader (a header, then piece after piece) starts where this one ends.
      if (b != cached_) {
        cache_.resize(end - begin);
        cached_ = -1;
        read_raw(begin, end - begin, cache_.data());
        check(b, cache_.data(), end - begin);
        cached_ = static_cast<int64_t>(b);
      }
      std::memcpy(out, cache_.data() + (offset - begin), n);
    }
    out += n;
    offset += n;
    length -= n;
  }
}

Files read_verified(const std::string& dir_text, bool* fell_back, const FileFilter& only, ReadInfo* info) {
  fs::path dir = normalized(dir_text);
  const fs::path old = sibling(dir, ".old");
  if (fell_back) *fell_back = false;
  if (!fs::exists(dir)) {
    if (!fs::exists(old))
      throw UsageError("load_state: no checkpoint at " + dir.string() + " (the directory does not exist, nor " +
                       old.string() + "); pass the directory given to save_state");
    dir = old;
    if (fell_back) *fell_back = true;
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0 && st.st_uid != ::geteuid())
    throw UsageError("load_state: " + dir.string() + " belongs to " + files::describe_owner(st.st_uid) +
                     ", not to this user (" + files::describe_owner(::geteuid()) + "); a checkpoint another user " +
                     "can write may have been altered. Copy it to a directory of your own (cp -r) to load it");
  const fs::path manifest_path = dir / "MANIFEST";
  if (!fs::exists(manifest_path))
    throw UsageError("load_state: " + dir.string() + " is not a complete xlaunch checkpoint: " +
                     manifest_path.string() + " is missing");
  const std::string text = read_file(manifest_path);
  Files files;
  for (const auto& [path, entry] : parse_manifest(text, manifest_path.string())) {
    if (!only || only(path)) {
      files.emplace(path, read_part(dir.string(), path, entry));
      continue;
    }
    const fs::path file = dir / path;
    struct stat f {};
    if (::lstat(file.c_str(), &f) != 0)
      throw UsageError("load_state: checkpoint " + dir.string() + " is corrupt: " + file.string() + " is missing");
    if (static_cast<size_t>(f.st_size) != entry.size)
      throw UsageError("load_state: checkpoint " + dir.string() + " is corrupt: " + file.string() + " has " +
                       std::to_string(f.st_size) + " bytes; its MANIFEST says " + std::to_string(entry.size));
  }
  if (info) *info = ReadInfo{dir.string(), text};
  return files;
}

void set_load_hook(std::function<void(const std::string& event)> hook) { notify_read.set(std::move(hook)); }

}  // namespace checkpoint
}  // namespace xlaunch
