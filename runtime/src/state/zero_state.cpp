#include "state/zero_state.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/scalar_tensor.h>
#include <torch/serialize/output-archive.h>

#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "check.h"
#include "ddp/optim_state.h"
#include "ddp/zero_optimizer.h"
#include "xlaunch/error.h"
#include "xlaunch/reducer.h"

namespace xlaunch::checkpoint {

namespace {

using torch::serialize::InputArchive;
using torch::serialize::OutputArchive;

constexpr const char* kSameGroups =
    ". Build the optimizer as the program that saved it did: the same parameter groups, holding the same parameters";

// (model, parameter index) of a parameter of the prepared models, or model == reducers.size().
std::pair<size_t, size_t> find_param(const at::Tensor& p, const Reducers& reducers) {
  for (size_t m = 0; m < reducers.size(); ++m) {
    const auto& params = reducers[m]->params();
    for (size_t i = 0; i < params.size(); ++i)
      if (params[i].unsafeGetTensorImpl() == p.unsafeGetTensorImpl()) return {m, i};
  }
  return {reducers.size(), 0};
}

ParamLayout named(const at::Tensor& p, int group, size_t k, const Reducers& reducers) {
  const auto [m, i] = find_param(p, reducers);
  if (m == reducers.size())
    throw UsageError("load_state: parameter " + std::to_string(k) + " of the optimizer's group " + std::to_string(group) +
                     " belongs to no prepared model (or is frozen), so its state cannot be found in a checkpoint "
                     "saved with ddp.zero_stage >= 1, which names parameters by their model's names. Build the "
                     "optimizer over the prepared models' trainable parameters");
  return ParamLayout{group, m, reducers[m]->names()[i], p.numel()};
}

std::string list(const std::vector<NamedSegment>& segments) {
  std::string out;
  for (const NamedSegment& s : segments)
    out += (out.empty() ? "'" : ", '") + s.param + "' [" + std::to_string(s.offset) + ", " +
           std::to_string(s.offset + s.length) + ")";
  return out;
}

// One saved optimizer file: its groups' state keys, and the state of each.
class SavedFile {
 public:
  SavedFile(std::unique_ptr<InputArchive> archive, int rank, const std::string& what) : archive_(std::move(archive)) {
    const std::string where = what + " (saved rank " + std::to_string(rank) + ")";
    try {
      archive_->read("state", state_);
      archive_->read("param_groups", groups_archive_);
      at::Tensor size;
      groups_archive_.read("param_groups/size", size);
      for (int64_t g = 0; g < size.item<int64_t>(); ++g) {
        InputArchive group;
        groups_archive_.read("param_groups/" + std::to_string(g), group);
        at::Tensor n;
        group.read("params/size", n);
        keys_.emplace_back();
        for (int64_t k = 0; k < n.item<int64_t>(); ++k) {
          c10::IValue key;
          group.read("params/" + std::to_string(k), key);
          keys_.back().push_back(key.toStringRef());
        }
      }
    } catch (const c10::Error& e) {
      throw UsageError("load_state: " + where + " is not an optimizer's saved state: " + e.what_without_backtrace());
    }
  }
  const std::vector<std::vector<std::string>>& keys() const { return keys_; }
  // The state of group g's k-th tensor; nullopt when it has none (the optimizer never stepped it).
  std::optional<StateEntries> entries(size_t g, size_t k) {
    InputArchive one;
    if (!state_.try_read(keys_[g][k], one)) return std::nullopt;
    return entries_of(one);
  }
  // Group g's options, read into a copy of `mine` (this optimizer's own type).
  std::unique_ptr<torch::optim::OptimizerOptions> options(size_t g, const torch::optim::OptimizerOptions& mine) {
    InputArchive group, options;
    groups_archive_.read("param_groups/" + std::to_string(g), group);
    group.read("options", options);
    auto out = mine.clone();
    out->serialize(options);
    return out;
  }

 private:
  std::unique_ptr<InputArchive> archive_;
  InputArchive state_, groups_archive_;
  std::vector<std::vector<std::string>> keys_;
};

bool same_value(const c10::IValue& a, const c10::IValue& b) {
  if (a.isTensor() && b.isTensor()) {
    const at::Tensor& x = a.toTensor();
    const at::Tensor& y = b.toTensor();
    return x.scalar_type() == y.scalar_type() && x.sizes() == y.sizes() && x.equal(y);
  }
  return a == b;
}

// One tensor this rank's optimizer will hold, as it is assembled.
struct Assembly {
  std::vector<Chunk> chunks;
  int64_t with_state = 0, without_state = 0;  // elements
  std::vector<std::string> keys;              // of the first saved state seen
  std::map<std::string, at::Tensor> elementwise;
  std::vector<std::pair<int64_t, StateEntries>> scalars;  // per chunk: its offset in the tensor, its per-piece values
};

}  // namespace

HeldGroups held_tensors(const torch::optim::Optimizer& inner, const ShardedOptimizer* sharded, const Reducers& reducers) {
  HeldGroups out;
  if (sharded) {
    for (const auto& group : sharded->pieces()) {
      out.emplace_back();
      for (const ShardedOptimizer::Bound& b : group) {
        const ShardedOptimizer::Model& model = sharded->models()[b.model];
        PieceLayout layout{model.id, {}};
        for (const zero::Segment& s : b.piece.segments)
          layout.segments.push_back(NamedSegment{model.reducer->names()[s.param], s.param_offset, s.length});
        out.back().push_back(HeldTensor{std::move(layout), b.tensor});
      }
    }
    return out;
  }
  const auto& groups = inner.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    out.emplace_back();
    for (size_t k = 0; k < groups[g].params().size(); ++k) {
      const at::Tensor& p = groups[g].params()[k];
      const ParamLayout named_p = named(p, static_cast<int>(g), k, reducers);
      out.back().push_back(HeldTensor{PieceLayout{named_p.model, {NamedSegment{named_p.name, 0, p.numel()}}}, p});
    }
  }
  return out;
}

std::vector<ParamLayout> params_of(const torch::optim::Optimizer& inner, const ShardedOptimizer* sharded,
                                   const Reducers& reducers) {
  std::vector<ParamLayout> out;
  const auto& groups = inner.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    const std::vector<at::Tensor>& params = sharded ? sharded->original_params()[g] : groups[g].params();
    for (size_t k = 0; k < params.size(); ++k) out.push_back(named(params[k], static_cast<int>(g), k, reducers));
  }
  return out;
}

OptimizerLayout whole_layout(const std::vector<ParamLayout>& params, int groups) {
  OptimizerLayout out;
  out.world = 1;
  out.stage = 0;
  out.groups = groups;
  out.params = params;
  out.pieces.assign(1, std::vector<std::vector<PieceLayout>>(static_cast<size_t>(groups)));
  for (const ParamLayout& p : params)
    out.pieces[0][static_cast<size_t>(p.group)].push_back(PieceLayout{p.model, {NamedSegment{p.name, 0, p.numel}}});
  return out;
}

void check_same_params(const OptimizerLayout& saved, const std::vector<ParamLayout>& mine, int groups,
                       const std::string& what) {
  const std::string fix = kSameGroups;
  if (saved.groups != groups)
    throw UsageError("load_state: " + what + " has " + std::to_string(saved.groups) + " parameter groups, this "
                     "optimizer has " + std::to_string(groups) + fix);
  auto describe = [](const ParamLayout& p) {
    return "'" + p.name + "' of model " + std::to_string(p.model) + " (" + std::to_string(p.numel) + " elements) in group " +
           std::to_string(p.group);
  };
  for (size_t i = 0; i < std::max(saved.params.size(), mine.size()); ++i) {
    if (i < saved.params.size() && i < mine.size() && saved.params[i] == mine[i]) continue;
    const std::string here = i < mine.size() ? describe(mine[i]) : "nothing";
    const std::string there = i < saved.params.size() ? describe(saved.params[i]) : "nothing";
    throw UsageError("load_state: the optimizer's parameter " + std::to_string(i) + " is " + here + " here, and " +
                     there + " in " + what + fix);
  }
}

std::set<int> saved_ranks_needed(const OptimizerLayout& saved, const HeldGroups& held) {
  const SavedIndex index(saved);
  std::set<int> ranks;
  for (const auto& group : held)
    for (const HeldTensor& h : group)
      for (const Chunk& c : index.chunks(h.layout)) ranks.insert(c.rank);
  if (ranks.empty()) ranks.insert(0);  // nothing held here: a file for the group options
  return ranks;
}

Resharded reshard(const torch::optim::Optimizer& inner, const HeldGroups& held, const OptimizerLayout& saved,
                  const RankFile& rank_file, const at::Device& device, const std::string& what) {
  const auto& groups = inner.param_groups();
  if (saved.groups != static_cast<int>(groups.size()))
    throw UsageError("load_state: " + what + " has " + std::to_string(saved.groups) + " parameter groups, this "
                     "optimizer has " + std::to_string(groups.size()) + kSameGroups);
  // Where each element of each tensor held here lies in the saved pieces.
  const SavedIndex index(saved);
  std::vector<std::vector<Assembly>> built(held.size());
  for (size_t g = 0; g < held.size(); ++g)
    for (const HeldTensor& h : held[g]) {
      Assembly a;
      a.chunks = index.chunks(h.layout);
      int64_t covered = 0;
      for (const Chunk& c : a.chunks) {
        covered += c.length;
        if (c.group != static_cast<int>(g))
          throw UsageError("load_state: " + list(h.layout.segments) + " is in the optimizer's group " + std::to_string(g) +
                           " here, and was in group " + std::to_string(c.group) + " in " + what +
                           ". Build the optimizer's groups as the program that saved it did");
      }
      if (covered != h.layout.numel())
        throw UsageError("load_state: " + what + " holds " + std::to_string(covered) + " of the " +
                         std::to_string(h.layout.numel()) + " elements of " + list(h.layout.segments) +
                         ". Build the optimizer over the same parameters as the program that saved it");
      built[g].push_back(std::move(a));
    }
  // The saved files to read; the first gives the group options (every one holds them).
  const std::set<int> ranks = saved_ranks_needed(saved, held);

  // The saved files one at a time: each is read, its overlapping parts copied, and dropped.
  std::vector<std::unique_ptr<torch::optim::OptimizerOptions>> options;
  for (const int r : ranks) {
    SavedFile file(rank_file(r), r, what);
    const auto& pieces = saved.pieces[static_cast<size_t>(r)];
    // A stage-0 checkpoint's layout is this run's parameters (whole_layout): its file says whether
    // its groups held as many.
    if (file.keys().size() != pieces.size())
      throw UsageError("load_state: " + what + " has " + std::to_string(file.keys().size()) + " parameter groups, " +
                       "this optimizer has " + std::to_string(pieces.size()) + kSameGroups);
    for (size_t g = 0; g < pieces.size(); ++g)
      if (file.keys()[g].size() != pieces[g].size())
        throw UsageError("load_state: group " + std::to_string(g) + " of " + what + " (saved rank " + std::to_string(r) +
                         ") holds " + std::to_string(file.keys()[g].size()) + " tensors, where this optimizer expects " +
                         std::to_string(pieces[g].size()) + kSameGroups);
    if (options.empty())
      for (size_t g = 0; g < groups.size(); ++g) {
        try {
          options.push_back(file.options(g, groups[g].options()));
        } catch (const c10::Error& e) {
          throw UsageError("load_state: the options of group " + std::to_string(g) + " in " + what + " are not this "
                           "optimizer's kind (build the same optimizer type): " + e.what_without_backtrace());
        }
      }
    std::map<std::pair<size_t, size_t>, std::optional<StateEntries>> cache;
    for (size_t g = 0; g < held.size(); ++g)
      for (size_t t = 0; t < held[g].size(); ++t) {
        Assembly& a = built[g][t];
        const int64_t numel = held[g][t].layout.numel();
        for (const Chunk& c : a.chunks) {
          if (c.rank != r) continue;
          auto it = cache.find({g, c.piece});
          if (it == cache.end()) it = cache.emplace(std::make_pair(g, c.piece), file.entries(g, c.piece)).first;
          if (!it->second) {
            a.without_state += c.length;
            continue;
          }
          a.with_state += c.length;
          const int64_t piece_numel = pieces[g][c.piece].numel();
          std::vector<std::string> keys;
          StateEntries scalars;
          for (const auto& [key, value] : *it->second) {
            keys.push_back(key);
            if (!value.isTensor() || value.toTensor().dim() == 0) {
              scalars.emplace_back(key, value);
              continue;
            }
            const at::Tensor& src = value.toTensor();
            if (src.numel() != piece_numel)
              throw UsageError("load_state: the state '" + key + "' of " + list(pieces[g][c.piece].segments) + " in " +
                               what + " has " + std::to_string(src.numel()) + " elements where they have " +
                               std::to_string(piece_numel) + ": the optimizer's groups held other parameters when it "
                               "was saved, or its state is not one value per element and cannot be re-sliced. Build "
                               "the optimizer as the program that saved it did, or resume with the world size and "
                               "ddp.zero_stage it was saved with");
            at::Tensor& dst = a.elementwise[key];
            if (!dst.defined()) dst = at::empty({numel}, src.options());
            dst.narrow(0, c.offset, c.length).copy_(src.reshape({-1}).narrow(0, c.saved_offset, c.length));
          }
          if (a.keys.empty()) a.keys = keys;
          if (keys != a.keys)
            throw UsageError("load_state: the saved pieces of " + list(held[g][t].layout.segments) + " in " + what +
                             " hold different kinds of state; the checkpoint is inconsistent, resume from another one");
          a.scalars.emplace_back(c.offset, std::move(scalars));
        }
      }
  }

  // The archive the optimizer's load() reads: LibTorch's format (torch/optim/serialize.h).
  OutputArchive root;
  root.write("pytorch_version", c10::IValue("1.5.0"));
  OutputArchive state(root.compilation_unit());
  std::string note;
  auto key_of = [](const at::Tensor& t) { return std::to_string(reinterpret_cast<size_t>(t.unsafeGetTensorImpl())); };
  for (size_t g = 0; g < held.size(); ++g)
    for (size_t t = 0; t < held[g].size(); ++t) {
      Assembly& a = built[g][t];
      const HeldTensor& h = held[g][t];
      if (a.with_state == 0) continue;
      if (a.without_state > 0)
        throw UsageError("load_state: in " + what + ", some elements of " + list(h.layout.segments) + " have optimizer "
                         "state and others have none, which one tensor cannot hold. Resume with the world size and "
                         "ddp.zero_stage it was saved with");
      // Per-piece values: those of the saved piece holding the first element.
      const StateEntries* first = nullptr;
      for (const auto& [offset, values] : a.scalars)
        if (offset == 0) first = &values;
      XLAUNCH_ASSERT(first, "a tensor covered by saved pieces has no piece at its first element");
      for (const auto& [offset, values] : a.scalars)
        for (size_t e = 0; e < values.size() && note.empty(); ++e)
          if (!same_value(values[e].second, first->at(e).second))
            note = "the saved pieces of " + list(h.layout.segments) + " hold different values of '" + values[e].first +
                   "'; each tensor takes that of its first element's piece";
      OutputArchive one(root.compilation_unit());
      for (const std::string& key : a.keys) {
        const auto it = a.elementwise.find(key);
        if (it != a.elementwise.end()) {
          one.write(key, c10::IValue(it->second.view(h.tensor.sizes())));
          continue;
        }
        for (const auto& [k, v] : *first)
          if (k == key) one.write(key, v);
      }
      state.write(key_of(h.tensor), one);
    }
  root.write("state", state);
  OutputArchive groups_archive(root.compilation_unit());
  groups_archive.write("param_groups/size", at::scalar_tensor(static_cast<int64_t>(groups.size()), at::kLong));
  for (size_t g = 0; g < groups.size(); ++g) {
    OutputArchive group(root.compilation_unit());
    const size_t n = g < held.size() ? held[g].size() : 0;
    group.write("params/size", at::scalar_tensor(static_cast<int64_t>(n), at::kLong));
    for (size_t k = 0; k < n; ++k) group.write("params/" + std::to_string(k), c10::IValue(key_of(held[g][k].tensor)));
    OutputArchive opts(root.compilation_unit());
    options[g]->serialize(opts);
    group.write("options", opts);
    groups_archive.write("param_groups/" + std::to_string(g), group);
  }
  root.write("param_groups", groups_archive);
  built.clear();
  std::stringstream bytes;
  root.save_to(bytes);
  Resharded out;
  out.archive = std::make_unique<InputArchive>();
  out.archive->load_from(bytes, device);
  out.note = note;
  return out;
}

}  // namespace xlaunch::checkpoint
