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
//   model_<i>/rank_<r>.pt, model_<i>/layout.txt, model_<i>/tensors.txt   at ZeRO stage 3: rank
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

namespace xlaunch::checkpoint {

inline constexpr int kFormatVersion = 1;
// rank0/trainer_state.txt's format_version when a model is saved as shards (ZeRO stage 3,
// state/model_shards.h): an xlaunch that reads only 1 refuses it by its version, instead of taking
// the missing parameters for another model. The MANIFEST stays at kFormatVersion.
inline constexpr int kShardedModelFormatVersion = 2;

// A checkpoint's files: path relative to its directory -> contents.
using Files = std::map<std::string, std::string>;

// Writes `files` (and a MANIFEST) into a new directory next to `dir`, fsyncs them, then swaps it
// into place: <dir> -> <dir>.old, new -> <dir>, <dir>.old removed. At every moment either <dir>
// or (after a crash between the two renames) <dir>.old holds a complete checkpoint.
// Throws Error naming the path on an I/O failure, and UsageError when <dir> exists but is not a
// checkpoint (it would be replaced).
void write_atomically(const std::string& dir, const Files& files);

// Reads and verifies a checkpoint (sizes and CRC32s against its MANIFEST). When <dir> is missing
// and <dir>.old exists (a save was interrupted), reads that and sets *fell_back. Throws UsageError
// naming the directory and the file for a missing, incomplete or corrupt checkpoint.
Files read_verified(const std::string& dir, bool* fell_back = nullptr);

// Removes a directory and everything in it (missing: nothing to do); Error naming the path when
// it cannot. Not std::filesystem::remove_all, which libtorch.so exports a broken copy of.
void remove_directory(const std::string& path);

// Test hook: called on the writing rank after each step of write_atomically, with "wrote <path>"
// for each file (MANIFEST last), "moved previous aside" and "moved new into place". Tests make
// it raise SIGKILL to show that an interrupted save leaves a loadable checkpoint. Empty: none.
void set_save_hook(std::function<void(const std::string& event)> hook);

}  // namespace xlaunch::checkpoint
