#include "state/model_shards.h"

#include <ATen/ops/empty.h>

#include <cstring>
#include <set>
#include <sstream>

#include "ddp/zero_layout.h"
#include "state/safetensors_format.h"
#include "state/trainer_state.h"
#include "xlaunch/error.h"
#include "xlaunch/reducer.h"

namespace xlaunch::checkpoint {

bool shards_params(const Reducer& reducer) { return reducer.zero_stage() == 3; }

std::string model_dir(size_t model) { return "model_" + std::to_string(model) + "/"; }

namespace {

// Whether the checkpoint's shards are format 2's torch pickles (else safetensors files).
bool pickled_shards(const Files& files) {
  const auto state = files.find("rank0/trainer_state.txt");
  if (state == files.end()) return false;
  const KeyValues kv = parse_key_values(state->second);
  const auto format = kv.find("format_version");
  return format != kv.end() && format->second == std::to_string(kPickledShardsFormatVersion);
}

}  // namespace

std::string model_rank_file(const Files& files, size_t model, int rank) {
  return model_dir(model) + "rank_" + std::to_string(rank) + (pickled_shards(files) ? ".pt" : ".safetensors");
}

std::vector<HeldTensor> param_pieces(const Reducer& reducer, size_t model) {
  const std::vector<int> group(reducer.params().size(), 0);
  std::vector<HeldTensor> out;
  for (const zero::Piece& p : zero::pieces_of_rank(reducer.buckets(), reducer.numels(), group, reducer.shard_world(), reducer.shard_rank())) {
    PieceLayout layout{model, {}};
    for (const zero::Segment& s : p.segments)
      layout.segments.push_back(NamedSegment{reducer.names()[s.param], s.param_offset, s.length});
    out.push_back(HeldTensor{std::move(layout), reducer.param_piece(p.bucket, p.offset, p.length)});
  }
  return out;
}

NamedTensors shard_tensors(const Reducer& reducer, size_t model) {
  NamedTensors out;
  for (HeldTensor& h : param_pieces(reducer, model)) out.emplace_back("piece." + std::to_string(out.size()), h.tensor);
  return out;
}

Files sharded_model_files(const Reducer& reducer, const torch::nn::Module& module, size_t model,
                          const std::vector<std::string>& rank_texts) {
  OptimizerLayout layout;
  layout.world = reducer.shard_world();
  layout.stage = reducer.zero_stage();
  layout.groups = 1;
  for (size_t i = 0; i < reducer.params().size(); ++i)
    layout.params.push_back(ParamLayout{0, model, reducer.names()[i], reducer.numels()[i]});
  std::string text = layout_text(layout, kModelLayoutHeader);
  for (const std::string& r : rank_texts) text += r;
  // Shapes and dtypes from the module's own entries: a free parameter keeps both.
  std::set<std::string> sharded(reducer.names().begin(), reducer.names().end());
  std::ostringstream shapes;
  for (const auto& [name, t] : model_state(module)) {
    if (!sharded.count(name)) continue;
    shapes << "tensor " << at::toString(t.scalar_type()) << " " << t.dim();
    for (int64_t d : t.sizes()) shapes << " " << d;
    shapes << " " << name << "\n";
  }
  return Files{{model_dir(model) + "layout.txt", text}, {model_dir(model) + "tensors.txt", shapes.str()}};
}

std::vector<HeldTensor> held_entries(const torch::nn::Module& module, const Reducer& reducer, size_t model) {
  std::vector<HeldTensor> out;
  std::set<std::string> sharded;
  if (shards_params(reducer)) {
    sharded.insert(reducer.names().begin(), reducer.names().end());
    out = param_pieces(reducer, model);
  }
  for (const auto& [name, t] : model_state(module))
    if (!sharded.count(name)) out.push_back(HeldTensor{PieceLayout{model, {NamedSegment{name, 0, t.numel()}}}, t});
  return out;
}

namespace {

at::ScalarType dtype_named(const std::string& name, const std::string& path) {
  for (int i = 0; i < static_cast<int>(at::ScalarType::NumOptions); ++i) {
    const auto t = static_cast<at::ScalarType>(i);
    if (name == at::toString(t)) return t;
  }
  throw UsageError("load_state: " + path + " names an unknown dtype '" + name +
                   "'. The checkpoint's sharded model is damaged; resume from another checkpoint");
}

}  // namespace

SavedModel::SavedModel(const Files& files, size_t model, const CheckpointOnDisk* disk)
    : files_(files), model_(model), disk_(disk), pickled_(pickled_shards(files)) {
  whole_ = unpickle(files, "rank0/model_" + std::to_string(model) + ".pt");
  for (size_t k = 0; k < whole_.size(); ++k) whole_index_[whole_[k].first] = k;
  const std::string dir = model_dir(model);
  const auto layout = files.find(dir + "layout.txt");
  if (layout == files.end()) return;
  layout_ = parse_layout(layout->second, dir + "layout.txt", kModelLayoutHeader);
  index_ = std::make_unique<SavedIndex>(*layout_);
  const auto shapes = files.find(dir + "tensors.txt");
  if (shapes == files.end()) throw UsageError("load_state: the checkpoint has " + dir + "layout.txt but no " + dir +
                                              "tensors.txt; it is incomplete: resume from another checkpoint");
  std::istringstream in(shapes->second);
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::string word, dtype;
    int64_t dims = -1;
    words >> word >> dtype >> dims;
    std::vector<int64_t> sizes(static_cast<size_t>(std::max<int64_t>(dims, 0)));
    for (int64_t& d : sizes) words >> d;
    std::string name;
    if (words.get() == ' ') std::getline(words, name);
    if (word != "tensor" || dims < 0 || !words.eof() || name.empty())
      throw UsageError("load_state: " + dir + "tensors.txt line '" + line +
                       "' is not 'tensor <dtype> <dims> <sizes...> <name>'. The checkpoint's sharded model is "
                       "damaged; resume from another checkpoint");
    shapes_[name] = {dtype_named(dtype, dir + "tensors.txt"), sizes};
  }
  for (const ParamLayout& p : layout_->params)
    if (!shapes_.count(p.name))
      throw UsageError("load_state: " + dir + "tensors.txt does not give the shape of '" + p.name +
                       "'. The checkpoint's sharded model is damaged; resume from another checkpoint");
}

NamedTensors SavedModel::described() const {
  NamedTensors out = whole_;
  if (layout_)
    for (const ParamLayout& p : layout_->params) {
      const auto& [dtype, sizes] = shapes_.at(p.name);
      out.emplace_back(p.name, at::empty(sizes, at::TensorOptions().dtype(dtype).device(at::kMeta)));
    }
  return out;
}

at::Tensor SavedModel::whole_entry(const std::string& name) const {
  const auto it = whole_index_.find(name);
  return it == whole_index_.end() ? at::Tensor() : whole_[it->second].second;
}

std::optional<std::string> SavedModel::missing(const PieceLayout& target) const {
  for (const NamedSegment& s : target.segments) {
    const at::Tensor whole = whole_entry(s.param);
    if (whole.defined() && s.offset + s.length <= whole.numel()) continue;
    int64_t found = 0;
    if (index_)
      for (const Chunk& c : index_->chunks(PieceLayout{target.model, {s}})) found += c.length;
    if (found != s.length)
      return "'" + s.param + "' [" + std::to_string(s.offset) + ", " + std::to_string(s.offset + s.length) + ")";
  }
  return std::nullopt;
}

std::set<int> SavedModel::ranks_for(const PieceLayout& target) const {
  std::set<int> out;
  if (!index_) return out;
  for (const NamedSegment& s : target.segments)
    if (!whole_entry(s.param).defined())
      for (const Chunk& c : index_->chunks(PieceLayout{target.model, {s}})) out.insert(c.rank);
  return out;
}

// One saved rank's shard file, opened: its pieces' places (safetensors, in memory or in place on
// disk) or, for format_version 2 (pickled_), the pieces unpickled.
struct SavedModel::RankFile {
  std::string path;
  std::vector<at::Tensor> unpickled;
  const std::string* bytes = nullptr;
  std::unique_ptr<PartReader> reader;
  std::vector<safetensors::Entry> pieces;  // piece k's dtype and bytes
  uint64_t data_start = 0;
  uint64_t last_read = 0;  // SavedModel::reads_ when last read

  void read(uint64_t offset, uint64_t length, void* dst) const {
    if (reader) return reader->read_at(offset, length, dst);
    std::memcpy(dst, bytes->data() + offset, length);
  }
};

SavedModel::~SavedModel() = default;

void SavedModel::release() {
  released_bytes_ = bytes_read();
  ranks_.clear();
}

uint64_t SavedModel::bytes_read() const {
  uint64_t n = released_bytes_;
  for (const auto& [rank, file] : ranks_)
    if (file->reader) n += file->reader->bytes_read();
  return n;
}

void SavedModel::make_room() {
  for (;;) {
    int open = 0;
    RankFile* oldest = nullptr;
    for (auto& [rank, file] : ranks_)
      if (file->reader && file->reader->is_open()) {
        ++open;
        if (!oldest || file->last_read < oldest->last_read) oldest = file.get();
      }
    if (open < kMaxOpenFiles) return;
    oldest->reader->close();
  }
}

SavedModel::RankFile& SavedModel::rank_file(int rank) {
  auto it = ranks_.find(rank);
  if (it != ranks_.end()) return *it->second;
  auto file = std::make_unique<RankFile>();
  file->path = model_rank_file(files_, model_, rank);
  const std::string& path = file->path;
  const auto damaged = [&](const std::string& why) {
    return UsageError("load_state: " + path + " " + why +
                      ". The checkpoint's sharded model is damaged; resume from another checkpoint");
  };
  const std::vector<PieceLayout>& layout = layout_->pieces[static_cast<size_t>(rank)][0];
  if (pickled_) {
    std::map<std::string, at::Tensor> by_name;
    for (auto& [name, t] : unpickle(files_, path)) by_name[name] = t;
    for (size_t n = 0; n < layout.size(); ++n) {
      const auto p = by_name.find("piece." + std::to_string(n));
      if (p == by_name.end() || p->second.numel() != layout[n].numel())
        throw damaged("does not hold piece " + std::to_string(n) + " as its layout says");
      file->unpickled.push_back(p->second.reshape({-1}));
    }
  } else {
    uint64_t size = 0;
    if (const auto in_memory = files_.find(path); in_memory != files_.end()) {
      file->bytes = &in_memory->second;
      size = in_memory->second.size();
    } else {
      if (!disk_) throw damaged("is missing");
      const auto entry = disk_->manifest.find(path);
      if (entry == disk_->manifest.end()) throw damaged("is missing");
      make_room();
      // Checked block by block where the save wrote the blocks' CRC32s (rank 0 read them, verified).
      std::optional<BlockCrcs> blocks;
      if (const auto side = files_.find(block_crc_path(path)); side != files_.end())
        blocks = parse_block_crcs(side->second, block_crc_path(path));
      file->reader = std::make_unique<PartReader>(disk_->dir, path, entry->second, blocks ? &*blocks : nullptr);
      size = file->reader->size();
    }
    const safetensors::Index index = safetensors::read_index(
        size, [&](uint64_t offset, uint64_t length, void* dst) { file->read(offset, length, dst); }, path);
    file->data_start = index.data_start;
    std::map<std::string, const safetensors::Entry*> by_name;
    for (const safetensors::Entry& e : index.entries) by_name[e.name] = &e;
    for (size_t n = 0; n < layout.size(); ++n) {
      const auto p = by_name.find("piece." + std::to_string(n));
      int64_t numel = 1;
      if (p != by_name.end())
        for (int64_t d : p->second->shape) numel *= d;
      if (p == by_name.end() || p->second->shape.size() != 1 || numel != layout[n].numel())
        throw damaged("does not hold piece " + std::to_string(n) + " as its layout says");
      file->pieces.push_back(*p->second);
    }
  }
  return *ranks_.emplace(rank, std::move(file)).first->second;
}

void SavedModel::read_chunk(int rank, size_t k, int64_t saved_offset, at::Tensor dst) {
  RankFile& file = rank_file(rank);
  if (pickled_) {
    dst.copy_(file.unpickled.at(k).narrow(0, saved_offset, dst.numel()));
    return;
  }
  file.last_read = ++reads_;
  if (file.reader && !file.reader->is_open()) make_room();
  const safetensors::Entry& piece = file.pieces.at(k);
  const at::ScalarType saved = piece.dtype->type;
  at::Tensor into = dst.scalar_type() == saved && dst.is_contiguous() ? dst : at::empty({dst.numel()}, at::TensorOptions().dtype(saved));
  const uint64_t element = static_cast<uint64_t>(into.element_size());
  file.read(file.data_start + piece.begin + static_cast<uint64_t>(saved_offset) * element,
            static_cast<uint64_t>(dst.numel()) * element, into.data_ptr());
  if (!into.is_same(dst)) dst.copy_(into);
}

at::Tensor SavedModel::read(const PieceLayout& target, const at::Tensor& like) {
  at::Tensor out = at::empty({target.numel()}, like.options().device(at::kCPU));
  int64_t at = 0;
  for (const NamedSegment& s : target.segments) {
    const at::Tensor whole = whole_entry(s.param);
    if (whole.defined()) {
      out.narrow(0, at, s.length).copy_(whole.reshape({-1}).narrow(0, s.offset, s.length));
    } else {
      for (const Chunk& c : index_->chunks(PieceLayout{target.model, {s}}))
        read_chunk(c.rank, c.piece, c.saved_offset, out.narrow(0, at + c.offset, c.length));
    }
    at += s.length;
  }
  return out;
}

at::Tensor SavedModel::entry(const std::string& name) {
  const at::Tensor whole = whole_entry(name);
  if (whole.defined()) return whole;
  const auto shape = shapes_.find(name);
  const ParamLayout* param = nullptr;
  if (layout_)
    for (const ParamLayout& p : layout_->params)
      if (p.name == name) param = &p;
  if (!param || shape == shapes_.end())
    throw UsageError("model " + std::to_string(model_) + " of the checkpoint has no entry '" + name + "'");
  const auto& [dtype, sizes] = shape->second;
  const PieceLayout all{model_, {NamedSegment{name, 0, param->numel}}};
  if (const auto gap = missing(all))
    throw UsageError("the checkpoint does not hold " + *gap + " of model " + std::to_string(model_) + ": its " +
                     model_dir(model_) + "layout.txt is damaged");
  return read(all, at::empty({0}, at::TensorOptions().dtype(dtype))).view(sizes);
}

NamedTensors SavedModel::whole_model() {
  NamedTensors out;
  for (const auto& [name, t] : described()) out.emplace_back(name, entry(name));
  release();
  return out;
}

}  // namespace xlaunch::checkpoint
