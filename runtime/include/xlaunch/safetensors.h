// Model weights as safetensors, in the layout Hugging Face tools read and write
// (transformers' from_pretrained, safetensors.torch.load_file, huggingface_hub): what
// Accelerator::save_model writes, and what load_model reads back into a module.
//
// A directory written by save_safetensors holds either
//   model.safetensors                     every tensor, when they fit in max_shard_bytes, or
//   model-00001-of-0000N.safetensors ...  the shards, and
//   model.safetensors.index.json          {"metadata": {"total_size": <data bytes>},
//                                          "weight_map": {<tensor name>: <shard file>}}
// next to whatever else the directory holds (config.json, tokenizer files), which is left alone.
//
// One .safetensors file: 8 bytes, the header's length N (little-endian u64); N bytes of JSON,
// padded with spaces to a multiple of 8; then the tensors' bytes, back to back, little-endian,
// row-major. The header maps each name to {"dtype", "shape", "data_offsets": [begin, end)}
// (offsets into the data that follows the header), and "__metadata__" to string pairs; ours holds
// "format": "pt", which transformers requires, and the caller's metadata. Tensors are stored by
// element size (largest first), then by name, as the reference writer does: with the header
// padded to 8 bytes, each tensor then starts at a multiple of its element size, so readers may map
// the file and use the bytes in place.
//
// Supported dtypes, by their safetensors names: F64 F32 F16 BF16 F8_E4M3 F8_E5M2 I64 I32 I16 I8
// U64 U32 U16 U8 BOOL. Complex and quantized tensors have no safetensors dtype and are refused.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace xlaunch {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

inline constexpr const char* kSafetensorsFile = "model.safetensors";
inline constexpr const char* kSafetensorsIndexFile = "model.safetensors.index.json";

// A size as Hugging Face tools take it (max_shard_size="5GB"): a number, optionally with a
// decimal part, then a unit: B, KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of
// 1024), case-insensitive except the final B; no unit means bytes. "5GB" -> 5000000000,
// "10KiB" -> 10240, "1.5MB" -> 1500000, "4096" -> 4096. Throws UsageError for anything else,
// for a size that is not a whole positive number of bytes, and for "Gb" ("b" is bits to some tools).
int64_t parse_size(const std::string& text);

// Which tensors go in which shard, given each tensor's bytes in save order: huggingface_hub's
// split_torch_state_dict_into_shards. Tensors fill the current shard in order; one that would take
// it past max_shard_bytes starts a new shard. A tensor larger than max_shard_bytes gets a shard of
// its own, placed at once, before the shard being filled (hub's order):
// plan_shards({4, 4, 4}, 8) == {{0, 1}, {2}};  plan_shards({2, 10, 2}, 8) == {{1}, {0, 2}}.
// No tensors: no shards. Requires max_shard_bytes > 0.
std::vector<std::vector<size_t>> plan_shards(const std::vector<int64_t>& tensor_bytes, int64_t max_shard_bytes);

// "model-00002-of-00005.safetensors" for index 1 of 5 (index counts from 0, the name from 1).
std::string shard_file_name(size_t index, size_t count);

// Writes `tensors` into directory `dir` (created when missing) as model.safetensors when their
// bytes add up to at most max_shard_bytes (or when there are none), else as shards plus the index
// (plan_shards). Each tensor is written from a contiguous CPU copy, so any device and any strides
// are fine; the originals are not changed. Call it on one process (rank 0); the files are the
// same whichever rank writes them.
//
// Safe against a crash: every file is written under a hidden temporary name in `dir`, fsynced and
// then renamed, so no file under its final name is ever half-written. A sharded save removes the
// previous index and model.safetensors before the first shard takes its final name, and writes
// the new index last: an index, when present, names only files of the save that wrote it. A save
// interrupted between the two leaves no loadable model (load_safetensors says so) rather than a
// mix of two. Afterwards the previous save's files that the new one does not use are removed:
// model.safetensors.index.json after a single-file save, model.safetensors after a sharded one,
// and shards named model-NNNNN-of-NNNNN.safetensors that the new index does not list (only
// regular files owned by this user; anything else in `dir` is left alone), and the hidden
// temporaries of saves that were killed. One save into a directory at a time.
//
// metadata: string pairs added to every file's "__metadata__" (its "format" is always "pt").
// Throws UsageError, before writing anything, for: an empty `dir`; max_shard_bytes <= 0; an empty
// or repeated name, or "__metadata__"; an undefined, meta, sparse, complex or quantized tensor;
// a "format" other than "pt" in metadata; and tensors whose memory overlaps (tied weights: the
// file would hold two copies, and loading them back would untie them; safetensors.torch refuses
// them too). Views of disjoint parts of one buffer (flat gradient buckets) are fine. Throws
// Error naming the path when a file cannot be written.
void save_safetensors(const NamedTensors& tensors, const std::string& dir, int64_t max_shard_bytes,
                      const std::map<std::string, std::string>& metadata = {});

// The values of tensor i of a streamed save, when its bytes are written.
using TensorSource = std::function<at::Tensor(size_t index)>;

// save_safetensors for tensors made one at a time, so that no more than one need be held (a model
// assembled from shards, or gathered unit by unit): `described` gives each tensor's name, dtype and
// shape (a meta tensor will do: at::empty(sizes, at::kMeta)); value(i) is asked for described[i]'s
// values (any device, any strides) when they are written, once each, in the order
// safetensors_write_order gives, and may be dropped as soon as it returns. The files, the checks
// and the safety against a crash are save_safetensors'. Values that differ from their description
// (dtype, shape) throw Error; so does anything value throws, and the files of this save are then
// removed (a previous save's are left as they were).
void save_safetensors_streamed(const NamedTensors& described, const TensorSource& value, const std::string& dir,
                               int64_t max_shard_bytes, const std::map<std::string, std::string>& metadata = {});

// The indices of `described` in the order save_safetensors_streamed asks for them (shard after
// shard; in each, by element size, largest first, then by name): what a collective producer on
// the other ranks follows.
std::vector<size_t> safetensors_write_order(const NamedTensors& described, int64_t max_shard_bytes);

// Reads tensors (CPU, in the file's dtypes) from `path`: a .safetensors file, or a directory with
// model.safetensors (preferred, as transformers does) or model.safetensors.index.json and the
// shards it names (links are followed: hub caches are links). Returns them in file order (shard
// after shard). Checks what the reference reader checks: the header length against the file and
// 100 MB, the JSON, each dtype and shape, offsets that tile the data exactly; and that the index's
// files are plain names in that directory holding exactly the tensors it maps to them. Throws
// UsageError naming the file and the first problem.
NamedTensors load_safetensors(const std::string& path);

// Loads `dir` (anything load_safetensors takes) into the module's parameters and buffers, matched
// by qualified name ("0.weight", "encoder.fc1.bias"), copying into the existing tensors (their
// devices are kept). All is checked before anything is copied; throws UsageError naming the first
// few of: names the module has and the file lacks ("missing") and the reverse ("unexpected"),
// both ignored when strict is false; and, strict or not, entries whose shape or dtype differ.
void load_model(torch::nn::Module& module, const std::string& dir, bool strict = true);

// Test hook: called during save_safetensors after each step, with "wrote <file>" (a temporary,
// fsynced), "removed <file>" (a previous save's), "renamed <file>" (now under its final name) and
// "wrote model.safetensors.index.json". Tests raise SIGKILL or throw from it to show what an
// interrupted save leaves. Empty: none.
void set_safetensors_save_hook(std::function<void(const std::string& event)> hook);

}  // namespace xlaunch
