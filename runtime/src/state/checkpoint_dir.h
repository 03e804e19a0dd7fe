// The on-disk format of Accelerator::save_state / load_state (docs/checkpointing.md), and the
// atomic directory writing it relies on. Training code calls the Accelerator; these are exposed
// for tests and tools.
//
// A checkpoint is a directory:
//   MANIFEST                 "crc32 bytes path" of every other file; written last, so a directory
//                            with a MANIFEST is complete
//   metadata.txt             for people: format version, world size, host, time, counters,
//                            parameter names and shapes (not read back)
//   config/env.txt           the XLAUNCH_* values of the run that saved it
//   config/config_file.yaml  a copy of the file XLAUNCH_CONFIG_FILE named, when it was set
//   rank0/trainer_state.txt  "key value" lines: counters, loader positions, GradScaler state
//   rank0/model_<i>.pt       prepared model i: parameters and buffers by name (torch pickle,
//                            torch.load reads it)
//   rank0/optimizer_<i>.pt   prepared optimizer i (torch::optim::Optimizer::save archive); at
//                            ZeRO stage 0 only
//   optimizer_<i>/rank_<r>.pt, optimizer_<i>/layout.txt   at ZeRO stages 1 and 2: rank r's
//                            optimizer over its pieces, and what every piece holds
//                            (state/sharded_layout.h, state/zero_state.h)
//   model_<i>/rank_<r>.safetensors, model_<i>/layout.txt, model_<i>/tensors.txt   at ZeRO stage 3: rank
//                            r's shard of model i's parameters, what every piece holds, and their
//                            shapes (state/model_shards.h); rank0/model_<i>.pt then holds the rest
//   rng/rank_<r>.pt          rank r's generator states: "cpu", and "cuda" on a GPU
//   ddp/model_<i>_rank_<r>.pt  rank r's communication-hook state of model i, when the hook keeps
//                            one (Reducer::hook_state, torch pickle)
// "rank0/" holds the state every rank shares, written by rank 0; sharded state (one file per
// rank) sits next to it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace xlaunch::checkpoint {

inline constexpr int kFormatVersion = 1;
// rank0/trainer_state.txt's format_version when a model is saved as shards (ZeRO stage 3,
// state/model_shards.h): an xlaunch that reads only 1 refuses it by its version, instead of taking
// the missing parameters for another model. The MANIFEST stays at kFormatVersion.
inline constexpr int kShardedModelFormatVersion = 3;
// The first format of sharded models, still read: the ranks' shards as torch pickles
// (model_<i>/rank_<r>.pt) where format 3 writes safetensors files.
inline constexpr int kPickledShardsFormatVersion = 2;

// A checkpoint's files: path relative to its directory -> contents.
using Files = std::map<std::string, std::string>;

// Writes `files` (and a MANIFEST) into a new directory next to `dir`, fsyncs them, then swaps it
// into place: <dir> -> <dir>.old, new -> <dir>, <dir>.old removed. At every moment either <dir>
// or (after a crash between the two renames) <dir>.old holds a complete checkpoint.
// Throws Error naming the path on an I/O failure, and UsageError when <dir> exists but is not a
// checkpoint (it would be replaced).
void write_atomically(const std::string& dir, const Files& files);

// A checkpoint written in parts, by several processes into one directory (docs/checkpointing.md,
// "Who writes what"): rank 0 opens it (the checks of write_atomically, a new temporary directory
// next to <dir>); every rank may write its own files into tmp() with write_part; rank 0 writes the
// rest, adds the others' MANIFEST lines and commits (MANIFEST last, fsyncs, the swap). Destroyed
// without commit(), it removes the temporary: a failed save leaves the previous checkpoint alone.
// While it lives it holds a lock (flock on <parent>/.<name>.lock, removed at the end): another
// save into the same directory, by this job's background save or another job, is refused with
// UsageError instead of both writing and one removing the other's temporary.
class PendingCheckpoint {
 public:
  explicit PendingCheckpoint(const std::string& dir);
  ~PendingCheckpoint();
  PendingCheckpoint(const PendingCheckpoint&) = delete;
  PendingCheckpoint& operator=(const PendingCheckpoint&) = delete;
  const std::string& tmp() const { return tmp_; }
  // Writes one file (write_part) and records its MANIFEST line.
  void write(const std::string& path, const std::string& bytes);
  // MANIFEST lines of files another process wrote into tmp() ("crc32 bytes path\n" each).
  void add_lines(const std::string& lines);
  void commit();

 private:
  std::string dir_, tmp_;
  std::map<std::string, std::string> lines_;  // path -> its MANIFEST line
  bool committed_ = false;
  void release_lock();
  std::string lock_;  // <parent>/.<name>.lock
  int lock_fd_ = -1;  // flock on it, held until destroyed
};

// Writes `bytes` as `path` (relative) under the temporary directory `tmp` of a PendingCheckpoint,
// making its directories as needed, as a new file, fsynced; returns its MANIFEST line. A file read
// by ranges (reads_by_range) gets its block CRC32s beside it too (block_crc_path), and the two
// lines. Any process of the job that sees `tmp` may call it.
std::string write_part(const std::string& tmp, const std::string& path, const std::string& bytes);

// Files read by ranges rather than whole (the stage-3 model shards, model_<i>/rank_<r>.safetensors)
// are saved with a CRC32 per block beside them, in "<path>.crc32": a line "xlaunch-block-crc32
// <block bytes> <file bytes>", then one CRC32 (8 hex digits) per block, in order. A reader checks
// only the blocks it reads (PartReader), where the MANIFEST's CRC32 of the whole file would have it
// read all of it first. Checkpoints saved without them are read as before.
bool reads_by_range(const std::string& path);
std::string block_crc_path(const std::string& path);
struct BlockCrcs {
  uint64_t block = 0;  // bytes per block (the last may be shorter)
  uint64_t size = 0;   // the file's
  std::vector<uint32_t> crcs;
};
// Throws UsageError naming `where` when `text` is not such a file.
BlockCrcs parse_block_crcs(const std::string& text, const std::string& where);
// The block size of the files saved from now on (default 1 MiB); for tests, whose shards are small.
void set_crc_block_bytes(uint64_t bytes);

// Which files to read: all (empty), or those it returns true for.
using FileFilter = std::function<bool(const std::string& path)>;

// Reads and verifies a checkpoint (sizes and CRC32s against its MANIFEST). When <dir> is missing
// and <dir>.old exists (a save was interrupted), reads that and sets *fell_back. Throws UsageError
// naming the directory and the file for a missing, incomplete or corrupt checkpoint. With `only`,
// the files it refuses are not read (their presence and size are checked; read_part verifies
// their contents where they are read); `info` receives the directory read and its MANIFEST.
struct ReadInfo {
  std::string dir;       // <dir> or <dir>.old, normalized
  std::string manifest;  // its MANIFEST's text
};
Files read_verified(const std::string& dir, bool* fell_back = nullptr, const FileFilter& only = {},
                    ReadInfo* info = nullptr);

// A MANIFEST line: what a file must be.
struct ManifestEntry {
  std::string crc;  // 8 hex digits
  size_t size = 0;
};
// The MANIFEST's entries by path; throws UsageError naming `where` when it is not one.
std::map<std::string, ManifestEntry> parse_manifest(const std::string& text, const std::string& where);
// Reads `path` of the checkpoint directory `dir` (the one read_verified read), verified against
// `entry`; throws UsageError as read_verified does.
std::string read_part(const std::string& dir, const std::string& path, const ManifestEntry& entry);

// A file of the checkpoint directory `dir` read in place, range by range, instead of whole as
// read_part reads it: opening it checks its size and CRC32 against `entry`, streaming the file in
// blocks, so that nothing of a corrupt file is used; read_at then reads exactly the bytes asked
// for. No more than a block is held. Throws UsageError as read_part does.
// With the file's block CRC32s (`blocks`, from block_crc_path, itself verified), opening reads
// nothing: read_at reads each block it touches whole the first time and checks it before any of it
// is used; the last block read in part is kept, so that ranges read in order (a header, then piece
// after piece) read each byte once. A reader of part of the file reads that part, and at most a
// block more at either end of each range.
// close() gives the descriptor back (a reader of many files keeps few open); the next read_at
// opens the file again, and refuses it, naming it, when it is no longer the file checked (a save
// replaced the checkpoint meanwhile).
class PartReader {
 public:
  PartReader(const std::string& dir, const std::string& path, const ManifestEntry& entry,
             const BlockCrcs* blocks = nullptr);
  ~PartReader();
  PartReader(const PartReader&) = delete;
  PartReader& operator=(const PartReader&) = delete;
  uint64_t size() const { return size_; }
  void read_at(uint64_t offset, uint64_t length, void* dst);
  bool is_open() const { return fd_ >= 0; }
  void close();
  // The bytes read from the file so far, the opening's check included.
  uint64_t bytes_read() const { return bytes_read_; }

 private:
  void read_raw(uint64_t offset, uint64_t length, void* dst);  // reopening a closed descriptor

  std::string dir_, path_, file_;
  int fd_ = -1;
  uint64_t size_ = 0;
  uint64_t device_ = 0, inode_ = 0;  // the file checked
  uint64_t bytes_read_ = 0;
  std::vector<uint32_t> block_crcs_;  // with blocks: checked as read
  std::vector<bool> checked_;
  uint64_t block_ = 0;
  std::vector<char> cache_;  // the last block read in part, checked
  int64_t cached_ = -1;
};

// The bytes PartReaders have read from files on this thread (a rank reads its own files on its
// own thread): what a load or a merge costs in reads.
uint64_t bytes_read_in_place_on_this_thread();

// Whether `path` is one rank's own file (rng/, ddp/, optimizer_<i>/rank_<r>.pt,
// model_<i>/rank_<r>.safetensors or .pt), which that rank writes and reads itself where it sees the directory.
bool is_rank_file(const std::string& path);

// Removes a directory and everything in it (missing: nothing to do); Error naming the path when
// it cannot. Not std::filesystem::remove_all, which libtorch.so exports a broken copy of.
void remove_directory(const std::string& path);

// Test hook: ranks for which it returns true act as if they could not see the directory rank 0
// writes (another machine without a shared file system), so that tests reach the path where every
// rank's files travel to rank 0. Empty: none. shared_dir_refused asks it.
void set_shared_dir_hook(std::function<bool(int rank)> refuse);
bool shared_dir_refused(int rank);

// Test hook: called with "read <path>" for each file read_part reads (read_verified's included),
// on the rank that reads it. Tests count what each rank reads when it resumes. Empty: none.
void set_load_hook(std::function<void(const std::string& event)> hook);

// Test hook: called on the writing rank after each step of write_atomically, with "wrote <path>"
// for each file (MANIFEST last), "moved previous aside" and "moved new into place". Tests make
// it raise SIGKILL to show that an interrupted save leaves a loadable checkpoint. Empty: none.
void set_save_hook(std::function<void(const std::string& event)> hook);

}  // namespace xlaunch::checkpoint
