// A model's parameters in a checkpoint when ZeRO stage 3 shards them (docs/checkpointing.md,
// "Sharded model state"): no rank ever holds the whole model to save or to load it.
//
// Saving at stage 3, every rank's shard of every unit goes into a file of its own; rank 0's
// model file holds only what stage 3 keeps whole (buffers, frozen parameters):
//   model_<i>/rank_<r>.safetensors   rank r's pieces, a safetensors file {"piece.<k>": flat
//                           tensor}: any range of a piece can be read in place (merge-weights
//                           reads one parameter at a time). Checkpoints of format_version 2 hold
//                           model_<i>/rank_<r>.pt instead (a torch pickle of the same), still read.
//   model_<i>/layout.txt    the sharded_layout.h format under kModelLayoutHeader: one group, the
//                           sharded parameters (param 0 <model> <numel> <name>), each rank's pieces
//                           with their segments by parameter name
//   model_<i>/tensors.txt   "tensor <dtype> <dims> <d0> ... <name>" per sharded parameter: its
//                           shape and dtype, which the pieces (flat) do not say
// Loading, on any world size and stage, each rank fills what it holds (its shard pieces at stage 3,
// else whole tensors) from the saved pieces that overlap it (SavedIndex), or from rank 0's file
// for an entry saved whole: a stage-3 checkpoint resumes at stage 0, an unsharded one at stage 3,
// without either side gathering the model.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "state/checkpoint_dir.h"
#include "state/sharded_layout.h"
#include "state/torch_state.h"
#include "state/zero_state.h"

namespace xlaunch {

class Reducer;

namespace checkpoint {

// Whether model `reducer` keeps its parameters sharded (ZeRO stage 3): saved as pieces.
bool shards_params(const Reducer& reducer);

// This rank's pieces of the model's parameters at stage 3, unit by unit in layout order: one per
// unit's shard (without its padding), the tensor a view of the shard itself (writable).
std::vector<HeldTensor> param_pieces(const Reducer& reducer, size_t model);

// What this rank's model_<i>/rank_<r>.safetensors holds: param_pieces' tensors as "piece.<k>", in order
// (views of the shard: safetensors::file_bytes copies them).
NamedTensors shard_tensors(const Reducer& reducer, size_t model);

// The files of a sharded model beside the ranks' shards (rank_texts[r]: rank r's "rank ..." lines
// of its param_pieces' layouts),
// by path relative to the checkpoint: model_<i>/layout.txt and model_<i>/tensors.txt.
Files sharded_model_files(const Reducer& reducer, const torch::nn::Module& module, size_t model,
                          const std::vector<std::string>& rank_texts);

// The paths of model i's sharded files.
std::string model_dir(size_t model);  // "model_<i>/"
// Rank r's shard of model i in a checkpoint whose shared files are `files`: model_<i>/rank_<r>
// .safetensors, or .pt where rank0/trainer_state.txt says format_version 2.
std::string model_rank_file(const Files& files, size_t model, int rank);
// The checkpoint in place (merge-weights): its directory and MANIFEST, for the rank files that
// SavedModel reads range by range (PartReader) instead of from `files`.
struct CheckpointOnDisk {
  std::string dir;
  std::map<std::string, ManifestEntry> manifest;
};

// A model as a checkpoint holds it: rank 0's file (whole entries) and, when it was saved at stage 3,
// the sharded parameters' layout, shapes and every rank's pieces (read lazily, one file at a time).
class SavedModel {
 public:
  // Parses model i of `files`; throws UsageError naming the file for anything damaged. `files`
  // (and `disk`) must outlive this. A rank file that `files` does not hold is read from `disk`
  // when given: only the ranges asked for (format_version 2's pickles are read whole).
  SavedModel(const Files& files, size_t model, const CheckpointOnDisk* disk = nullptr);
  ~SavedModel();

  bool sharded() const { return layout_.has_value(); }
  // The saved ranks and stage when sharded.
  int saved_world() const { return layout_ ? layout_->world : 1; }
  // Every entry, whole ones as saved and sharded ones as meta tensors of their shape and dtype:
  // what check_same_model compares.
  NamedTensors described() const;
  // The entry saved whole under `name`, or an undefined tensor.
  at::Tensor whole_entry(const std::string& name) const;

  // Whether every element `target` names is in the checkpoint; else a description of the first
  // missing ("'w' [4, 8)").
  std::optional<std::string> missing(const PieceLayout& target) const;
  // The saved ranks whose files hold elements of `target`.
  std::set<int> ranks_for(const PieceLayout& target) const;
  // `target`'s elements, flat, in the saved dtype (CPU).
  at::Tensor read(const PieceLayout& target, const at::Tensor& like);
  // Entry `name` of described() whole: as saved, or a sharded one assembled from the pieces,
  // reading only its own ranges. merge-weights writes one at a time.
  at::Tensor entry(const std::string& name);
  // Every entry whole (entry(), in described() order).
  NamedTensors whole_model();
  // Drops the rank files read so far (their memory).
  void release();
  // The bytes read from the rank files on disk so far (their checks included); files given in
  // memory read nothing.
  uint64_t bytes_read() const;

 private:
  struct RankFile;
  RankFile& rank_file(int rank);
  // Closes the least recently read file's descriptor while kMaxOpenFiles are open (a checkpoint of
  // thousands of ranks, each parameter in every rank's file); it is opened again when read.
  void make_room();
  static constexpr int kMaxOpenFiles = 64;
  uint64_t reads_ = 0;
  // Elements [saved_offset, + dst.numel()) of saved rank `rank`'s piece k, into dst (1-D).
  void read_chunk(int rank, size_t k, int64_t saved_offset, at::Tensor dst);

  const Files& files_;
  size_t model_;
  const CheckpointOnDisk* disk_;
  bool pickled_;  // format_version 2: the ranks' shards are torch pickles
  NamedTensors whole_;
  std::map<std::string, size_t> whole_index_;
  std::optional<OptimizerLayout> layout_;
  std::unique_ptr<SavedIndex> index_;
  std::map<std::string, std::pair<at::ScalarType, std::vector<int64_t>>> shapes_;
  std::map<int, std::unique_ptr<RankFile>> ranks_;
  uint64_t released_bytes_ = 0;  // read by the files release() dropped
};

// What this rank holds of model i's entries, each with its layout: at stage 3 the sharded
// parameters as their pieces (param_pieces), everything else whole.
std::vector<HeldTensor> held_entries(const torch::nn::Module& module, const Reducer& reducer, size_t model);

}  // namespace checkpoint
}  // namespace xlaunch
