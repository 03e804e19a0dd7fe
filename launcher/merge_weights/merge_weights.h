// `xlaunch merge-weights CHECKPOINT OUT`: the full model(s) of an xlaunch checkpoint as safetensors,
// as `accelerate merge-weights` writes an FSDP checkpoint's. The checkpoint's rank0/model_<i>.pt
// hold every parameter and buffer of prepared model i whole (ZeRO stages 1 and 2 shard optimizer
// state and gradients, never the parameters); at stage 3 the parameters are in the ranks' shards
// (model_<i>/rank_<r>.pt, state/model_shards.h), assembled here one parameter at a time.
//
// This links the runtime (torch), so it is its own program, xlaunch_merge_weights, which the
// launcher (which never links torch) finds next to itself and execs.
//
// OUT receives, per model i:
//   i = 0:  model.safetensors, or model-0000k-of-0000N.safetensors + model.safetensors.index.json
//   i > 0:  model_<i>.safetensors, or model_<i>-0000k-of-0000N.safetensors +
//           model_<i>.safetensors.index.json
// (sharded when a model's bytes exceed max_shard_bytes; the index is huggingface_hub's, whose
// weight_map names these files). Model 0's files are what transformers' from_pretrained and
// safetensors.torch.load_file read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

namespace xlaunch::merge {

struct MergeOptions {
  std::string checkpoint;  // a checkpoint directory save_state wrote
  std::string out;         // created when missing
  bool overwrite = false;  // replace model files OUT already holds
  int64_t max_shard_bytes = 10'000'000'000;  // Accelerate's save_model default, "10GB"
};

// Pure: the models of a checkpoint, by the indices of its rank0/model_<i>.pt files, ascending.
// `paths`: the checkpoint's files, relative to it.
std::vector<size_t> model_indices(const std::vector<std::string>& paths);

// Pure: "model" for model 0, "model_<i>" for the others: the stem of its files in OUT.
std::string merged_stem(size_t model);

// Pure: the name in OUT of a file save_safetensors wrote for model `model` ("model.safetensors",
// "model-00001-of-00002.safetensors", "model.safetensors.index.json"): the same with its stem.
std::string merged_name(size_t model, const std::string& saved_name);

// Pure: true for a name merge-weights writes for some model (model.safetensors,
// model_3.safetensors.index.json, model_1-00002-of-00004.safetensors, ...): the files a merge into
// OUT would replace, which OUT must not hold without --overwrite.
bool is_merged_model_file(const std::string& name);

// Verifies the checkpoint (checkpoint_dir.h read_verified: MANIFEST, sizes; the CRC32s of the
// model files, the shards' as they are opened) and streams each model into OUT, one tensor at a
// time (save_safetensors_streamed): what a process holds is rank 0's model file (whole at stages
// 0-2; buffers and frozen parameters at stage 3) and one parameter being assembled. Every file is written under a temporary name in a
// hidden directory in OUT and renamed into place once all are written, an index after its shards:
// no file under a final name is ever half-written. With overwrite, model files of an earlier merge
// that this one does not write are removed afterwards. Prints one line per model written to `log`.
// Throws UsageError with the fix for: a missing directory, one that is not a checkpoint (no
// MANIFEST; a project directory names its checkpoints), a torn checkpoint, a checkpoint without
// models, OUT that is not a directory or cannot be written, OUT already holding model files
// (without overwrite); and what save_safetensors refuses (tied weights).
void merge_weights(const MergeOptions& o, std::ostream& log);

}  // namespace xlaunch::merge
