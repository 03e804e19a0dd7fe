// What a checkpoint records of a sharded optimizer (ZeRO stages 1 and 2, docs/checkpointing.md),
// and where each element of a tensor of this run lies in what it recorded. Pure: no torch.
//
// At zero_stage >= 1 rank r's optimizer holds pieces (ddp/zero_layout.h): flat runs of one bucket's
// shard, each made of segments of parameters. The checkpoint keeps every rank's optimizer file
// (optimizer_<i>/rank_<r>.pt) and this layout (optimizer_<i>/layout.txt): per rank, per parameter
// group, per piece in the order the group holds it, its model and its segments by parameter NAME.
// Names, not indices, so that another bucket plan (bucket_cap_mb), another world size or another
// stage can find the same elements. A stage-0 checkpoint is described the same way, as one "rank"
// whose pieces are whole parameters (one segment each).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace xlaunch::checkpoint {

// A run of one parameter's elements, in the parameter's flattened order.
struct NamedSegment {
  std::string param;
  int64_t offset = 0;
  int64_t length = 0;
  bool operator==(const NamedSegment& o) const { return param == o.param && offset == o.offset && length == o.length; }
};

// One tensor an optimizer holds: its model and its segments, in order (their lengths add up to
// the tensor's elements).
struct PieceLayout {
  size_t model = 0;
  std::vector<NamedSegment> segments;
  int64_t numel() const;
  bool operator==(const PieceLayout& o) const { return model == o.model && segments == o.segments; }
};

// One parameter as the program gave it to the optimizer.
struct ParamLayout {
  int group = 0;
  size_t model = 0;
  std::string name;
  int64_t numel = 0;
  bool operator==(const ParamLayout& o) const {
    return group == o.group && model == o.model && name == o.name && numel == o.numel;
  }
};

struct OptimizerLayout {
  int world = 1;
  int stage = 0;
  int groups = 0;
  // The optimizer's parameters, group by group, in the order the program's groups held them.
  std::vector<ParamLayout> params;
  // pieces[r][g]: what rank r's optimizer held in group g, in the group's order.
  std::vector<std::vector<std::vector<PieceLayout>>> pieces;
  bool operator==(const OptimizerLayout& o) const {
    return world == o.world && stage == o.stage && groups == o.groups && params == o.params && pieces == o.pieces;
  }
};

// The layout file's text:
//   xlaunch sharded optimizer layout
//   world_size 4
//   zero_stage 2
//   groups 2
//   param <group> <model> <numel> <name>                one per parameter, group by group
//   rank <r> group <g> pieces <n>                        then n pieces:
//   piece <model> <segments>                             then that many segments:
//   segment <param_offset> <length> <name>
// The name ends the line (it may hold spaces).
// The same format describes a stage-3 model's parameter shards (state/model_shards.h) under
// another first line, kModelLayoutHeader: one group, the model's sharded parameters, every rank's
// pieces of them.
inline constexpr const char* kOptimizerLayoutHeader = "xlaunch sharded optimizer layout";
inline constexpr const char* kModelLayoutHeader = "xlaunch sharded model layout";
std::string layout_text(const OptimizerLayout& layout, const char* header = kOptimizerLayoutHeader);
// This rank's "rank ..." lines alone: what each rank sends rank 0 with its optimizer file.
std::string rank_layout_text(int rank, const std::vector<std::vector<PieceLayout>>& groups);
// Parses layout_text; throws UsageError naming `path` and the line for anything else.
OptimizerLayout parse_layout(const std::string& text, const std::string& path, const char* header = kOptimizerLayoutHeader);

// Where `length` elements of a tensor of this run, from its element `offset`, lie in the saved
// layout: rank `rank`'s group `group`, piece `piece`, from its element `saved_offset`.
struct Chunk {
  int rank = 0;
  int group = 0;
  size_t piece = 0;
  int64_t saved_offset = 0;
  int64_t offset = 0;
  int64_t length = 0;
  bool operator==(const Chunk& o) const {
    return rank == o.rank && group == o.group && piece == o.piece && saved_offset == o.saved_offset &&
           offset == o.offset && length == o.length;
  }
};

// The saved pieces' segments, by (model, parameter name), for finding chunks.
class SavedIndex {
 public:
  explicit SavedIndex(const OptimizerLayout& saved);
  // The chunks that make up `target`, in its order. Elements the saved layout does not hold are in
  // none (the caller compares the lengths with target.numel()).
  std::vector<Chunk> chunks(const PieceLayout& target) const;

 private:
  struct Span {
    int64_t offset, length;  // in the parameter
    int rank, group;
    size_t piece;
    int64_t saved_offset;  // in the piece
  };
  std::map<std::pair<size_t, std::string>, std::vector<Span>> spans_;  // sorted by offset
};

}  // namespace xlaunch::checkpoint
