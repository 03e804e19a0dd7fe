#include "state/model_shards.h"

#include <ATen/ops/empty.h>

#include <set>
#include <sstream>

#include "ddp/zero_layout.h"
#include "xlaunch/error.h"
#include "xlaunch/reducer.h"

namespace xlaunch::checkpoint {

bool shards_params(const Reducer& reducer) { return reducer.zero_stage() == 3; }

std::string model_dir(size_t model) { return "model_" + std::to_string(model) + "/"; }

std::vector<HeldTensor> param_pieces(const Reducer& reducer, size_t model) {
  const std::vector<int> group(reducer.params().size(), 0);
  std::vector<HeldTensor> out;
  for (const zero::Piece& p : zero::pieces_of_rank(reducer.buckets(), reducer.numels(), group, reducer.world(), reducer.rank())) {
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
  layout.world = reducer.world();
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

SavedModel::SavedModel(const Files& files, size_t model) : files_(files), model_(model) {
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

const at::Tensor& SavedModel::piece(int rank, size_t k) {
  auto it = pieces_.find(rank);
  if (it == pieces_.end()) {
    const std::string path = model_dir(model_) + "rank_" + std::to_string(rank) + ".pt";
    std::map<std::string, at::Tensor> by_name;
    for (auto& [name, t] : unpickle(files_, path)) by_name[name] = t;
    std::vector<at::Tensor> pieces;
    for (size_t n = 0; n < layout_->pieces[static_cast<size_t>(rank)][0].size(); ++n) {
      const auto p = by_name.find("piece." + std::to_string(n));
      if (p == by_name.end() || p->second.numel() != layout_->pieces[static_cast<size_t>(rank)][0][n].numel())
        throw UsageError("load_state: " + path + " does not hold piece " + std::to_string(n) +
                         " as its layout says. The checkpoint's sharded model is damaged; resume from another checkpoint");
      pieces.push_back(p->second.reshape({-1}));
    }
    it = pieces_.emplace(rank, std::move(pieces)).first;
  }
  return it->second.at(k);
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
        out.narrow(0, at + c.offset, c.length).copy_(piece(c.rank, c.piece).narrow(0, c.saved_offset, c.length));
    }
    at += s.length;
  }
  return out;
}

NamedTensors SavedModel::whole_model() {
  NamedTensors out = whole_;
  if (!layout_) return out;
  for (const ParamLayout& p : layout_->params) {
    const auto& [dtype, sizes] = shapes_.at(p.name);
    const PieceLayout all{model_, {NamedSegment{p.name, 0, p.numel}}};
    if (const auto gap = missing(all))
      throw UsageError("the checkpoint does not hold " + *gap + " of model " + std::to_string(model_) + ": its " +
                       model_dir(model_) + "layout.txt is damaged");
    out.emplace_back(p.name, read(all, at::empty({0}, at::TensorOptions().dtype(dtype))).view(sizes));
  }
  release();
  return out;
}

}  // namespace xlaunch::checkpoint
