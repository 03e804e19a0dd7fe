#include "ddp/units.h"

#include <ATen/autocast_mode.h>
#include <ATen/core/grad_mode.h>
#include <ATen/Context.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/sequential.h>

#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "check.h"
#include "state/log_main.h"
#include "xlaunch/error.h"
#include "xlaunch/fully_shard.h"
#include "xlaunch/reducer.h"

namespace xlaunch {
namespace {

// ---- the registries -----------------------------------------------------------------------------

std::mutex& registry_mutex() {
  static std::mutex mu;
  return mu;
}
// Modules declared FullyShard, weakly: a module gone is no unit.
std::map<const torch::nn::Module*, std::weak_ptr<torch::nn::Module>>& declared() {
  static std::map<const torch::nn::Module*, std::weak_ptr<torch::nn::Module>> d;
  return d;
}
// The units of live Units.
std::map<const torch::nn::Module*, std::pair<Units*, size_t>>& live() {
  static std::map<const torch::nn::Module*, std::pair<Units*, size_t>> l;
  return l;
}

bool is_declared(const std::shared_ptr<torch::nn::Module>& m) {
  std::lock_guard<std::mutex> lk(registry_mutex());
  const auto it = declared().find(m.get());
  return it != declared().end() && it->second.lock() == m;
}

// ---- a Sequential's entries as units ------------------------------------------------------------

// AnyModule keeps its type-erased module private; a Sequential's entry becomes a unit by wrapping
// it. (Explicit instantiation may name a private member: the standard's own loophole.)
using AnyContent = std::unique_ptr<torch::nn::AnyModulePlaceholder> torch::nn::AnyModule::*;
template <AnyContent Member>
struct ContentAccess {
  friend AnyContent any_content() { return Member; }
};
AnyContent any_content();
template struct ContentAccess<&torch::nn::AnyModule::content_>;

// ---- activation checkpointing: what a recomputation replays -----------------------------------

// The random generators and autocast: as a unit's forward found them (captured), or as they are
// now. The CUDA generator is that of the device the unit's inputs are on.
struct ForwardContext {
  std::optional<at::Device> cuda;
  at::Tensor cpu_rng, cuda_rng;
  std::array<bool, 2> autocast{};
  std::array<at::ScalarType, 2> dtype{};

  static constexpr std::array<at::DeviceType, 2> kDevices{at::kCPU, at::kCUDA};
  static const at::Generator& generator(at::Device d) { return at::globalContext().defaultGenerator(d); }

  static ForwardContext now(std::optional<at::Device> cuda) {
    ForwardContext c;
    c.cuda = cuda;
    c.cpu_rng = state_of(generator(at::Device(at::kCPU)));
    if (cuda) c.cuda_rng = state_of(generator(*cuda));
    for (size_t d = 0; d < kDevices.size(); ++d) {
      c.autocast[d] = at::autocast::is_autocast_enabled(kDevices[d]);
      c.dtype[d] = at::autocast::get_autocast_dtype(kDevices[d]);
    }
    return c;
  }
  static ForwardContext captured(const std::vector<at::Tensor>& inputs) {
    std::optional<at::Device> cuda;
    for (const at::Tensor& t : inputs)
      if (t.defined() && t.is_cuda()) {
        cuda = t.device();
        break;
      }
    return now(cuda);
  }
  // Makes this thread's state `c`.
  static void put(const ForwardContext& c) {
    set_state_of(generator(at::Device(at::kCPU)), c.cpu_rng);
    if (c.cuda) set_state_of(generator(*c.cuda), c.cuda_rng);
    for (size_t d = 0; d < kDevices.size(); ++d) {
      at::autocast::set_autocast_enabled(kDevices[d], c.autocast[d]);
      at::autocast::set_autocast_dtype(kDevices[d], c.dtype[d]);
    }
  }
  static at::Tensor state_of(at::Generator g) {
    std::lock_guard<std::mutex> lk(g.mutex());
    return g.get_state();
  }
  static void set_state_of(at::Generator g, const at::Tensor& state) {
    std::lock_guard<std::mutex> lk(g.mutex());
    g.set_state(state);
  }
};

// While alive: this thread's generators and autocast are as in `forward`, and autocast keeps no cast
// copies of the parameters (they would outlive the unit's gather); then as they were.
class Replay {
 public:
  explicit Replay(const ForwardContext& forward)
      : before_(ForwardContext::now(forward.cuda)), cache_(at::autocast::is_autocast_cache_enabled()) {
    ForwardContext::put(forward);
    at::autocast::set_autocast_cache_enabled(false);
  }
  ~Replay() {
    try {
      ForwardContext::put(before_);
    } catch (...) {  // a generator refusing its own state back: nothing better to do here
    }
    at::autocast::set_autocast_cache_enabled(cache_);
  }
  Replay(const Replay&) = delete;
  Replay& operator=(const Replay&) = delete;

 private:
  ForwardContext before_;
  bool cache_;
};

// What a Sequential entry's recomputable forward throws when its output is no single tensor.
struct NotOneTensor {};

class UnitPlaceholder final : public torch::nn::AnyModulePlaceholder {
 public:
  explicit UnitPlaceholder(std::unique_ptr<torch::nn::AnyModulePlaceholder> inner)
      : torch::nn::AnyModulePlaceholder(inner->type_info), inner_(std::move(inner)) {}
  torch::nn::AnyValue forward(std::vector<torch::nn::AnyValue>&& arguments) override {
    detail::UnitForward unit(inner_->ptr().get());
    // (Without gradients there is nothing to recompute: the plain call below.)
    if (unit.recomputes() && !other_output_ && at::GradMode::is_enabled()) {
      std::vector<at::Tensor> inputs;
      for (torch::nn::AnyValue& a : arguments)
        if (at::Tensor* t = a.try_get<at::Tensor>()) inputs.push_back(*t);
      if (inputs.size() == arguments.size()) {
        std::shared_ptr<torch::nn::AnyModulePlaceholder> inner = inner_->copy();
        try {
          return torch::nn::AnyValue(unit.done(unit.recompute(inputs, [inner](const std::vector<at::Tensor>& ts) {
            std::vector<torch::nn::AnyValue> args;
            for (const at::Tensor& t : ts) args.emplace_back(t);
            torch::nn::AnyValue out = inner->forward(std::move(args));
            if (at::Tensor* t = out.try_get<at::Tensor>()) return *t;
            throw NotOneTensor{};
          })));
        } catch (const NotOneTensor&) {
          // Computed without autograd: computed again below, with it, drawing what it drew (the
          // generators were put back by Units::recompute_forward).
          other_output_ = true;
        }
      }
      unit.cannot_recompute("its forward takes arguments other than tensors, or returns other than one tensor");
    }
    torch::nn::AnyValue out = inner_->forward(std::move(arguments));
    if (at::Tensor* t = out.try_get<at::Tensor>()) return torch::nn::AnyValue(unit.done(std::move(*t)));
    return unit.done_any(std::move(out));
  }
  std::shared_ptr<torch::nn::Module> ptr() override { return inner_->ptr(); }
  std::unique_ptr<torch::nn::AnyModulePlaceholder> copy() const override {
    return std::make_unique<UnitPlaceholder>(inner_->copy());
  }
  std::unique_ptr<torch::nn::AnyModulePlaceholder> clone_module(std::optional<torch::Device> device) const override {
    return inner_->clone_module(device);  // a clone is not prepared: no unit
  }

 private:
  std::unique_ptr<torch::nn::AnyModulePlaceholder> inner_;
  bool other_output_ = false;  // its forward returned other than one tensor: not recomputed
};

// Routes the Sequential's calls of `entry` through UnitForward (once).
void reseat(torch::nn::SequentialImpl& seq, const torch::nn::Module* entry) {
  for (torch::nn::AnyModule& any : seq) {
    if (any.ptr().get() != entry) continue;
    std::unique_ptr<torch::nn::AnyModulePlaceholder>& content = any.*any_content();
    if (!dynamic_cast<UnitPlaceholder*>(content.get())) content = std::make_unique<UnitPlaceholder>(std::move(content));
  }
}

// ---- the cut ------------------------------------------------------------------------------------

struct Walk {
  explicit Walk(const WrapPolicy& p) : policy(p) {}
  const WrapPolicy& policy;
  std::map<const void*, size_t> index;  // parameter impl -> index into the reducer's parameters
  std::vector<std::vector<size_t>> unit_params;
  std::vector<std::string> unit_names;
  std::vector<std::shared_ptr<torch::nn::Module>> unit_modules;
  std::set<size_t> root;
  // For the policy's messages: whether a module the policy names (type or name) was met, the first
  // such module that is no candidate ("'head' (torch::nn::LinearImpl)"), and the largest candidate
  // the policy did not take.
  bool named_any = false;
  std::string named_not_candidate;
  std::string largest;
  size_t largest_size = 0;

  void params_of(const torch::nn::Module& m, bool recurse, std::vector<size_t>* into, std::set<size_t>* set) {
    for (const at::Tensor& p : m.parameters(recurse)) {
      const auto it = index.find(p.unsafeGetTensorImpl());
      if (it == index.end()) continue;  // frozen
      if (into) into->push_back(it->second);
      if (set) set->insert(it->second);
    }
  }
  // The trainable parameters `m` holds, counted once each (0: none).
  size_t trainable(const torch::nn::Module& m) {
    std::set<const void*> seen;
    size_t n = 0;
    for (const at::Tensor& p : m.parameters(true))
      if (index.count(p.unsafeGetTensorImpl()) && seen.insert(p.unsafeGetTensorImpl()).second)
        n += static_cast<size_t>(p.numel());
    return n;
  }
  // The policy names module `m` at `path` (type and name policies).
  bool names(const torch::nn::Module& m, const std::string& path) const {
    if (policy.kind == WrapPolicy::Kind::kType) return policy.names_type(m.name());
    if (policy.kind == WrapPolicy::Kind::kName) return policy.names_path(path);
    return false;
  }
  // The policy takes candidate `m` (holding `size` trainable parameters) at `path`.
  bool takes(const torch::nn::Module& m, const std::string& path, size_t size) const {
    switch (policy.kind) {
      case WrapPolicy::Kind::kAuto: return true;
      case WrapPolicy::Kind::kNone: return false;
      case WrapPolicy::Kind::kSize: return static_cast<int64_t>(size) >= policy.min_params;
      default: return names(m, path);
    }
  }
  void visit(const std::shared_ptr<torch::nn::Module>& m, const std::string& path) {
    params_of(*m, /*recurse=*/false, nullptr, &root);
    auto* seq = dynamic_cast<torch::nn::SequentialImpl*>(m.get());
    for (const auto& child : m->named_children()) {
      const std::string name = path.empty() ? child.key() : path + "." + child.key();
      const size_t size = trainable(*child.value());
      const bool named = size > 0 && names(*child.value(), name);
      named_any = named_any || named;
      const bool candidate = size > 0 && (seq || is_declared(child.value()));
      if (candidate && takes(*child.value(), name, size)) {
        if (seq) reseat(*seq, child.value().get());
        unit_modules.push_back(child.value());
        unit_names.push_back(name);
        unit_params.emplace_back();
        params_of(*child.value(), true, &unit_params.back(), nullptr);
        continue;
      }
      if (named && !candidate && named_not_candidate.empty())
        named_not_candidate = "'" + name + "' (" + child.value()->name() + ")";
      if (candidate && size > largest_size) {
        largest_size = size;
        largest = "'" + name + "' (" + child.value()->name() + ")";
      }
      visit(child.value(), name);
    }
  }
};

// The types of the model's modules that hold trainable parameters, as a policy names them.
std::string types_in(const torch::nn::Module& model, Walk& walk) {
  std::set<std::string> types;
  for (const auto& m : model.modules(/*include_self=*/false))
    if (walk.trainable(*m)) types.insert(WrapPolicy::type_key(m->name(), false));
  std::string s;
  for (const std::string& t : types) s += (s.empty() ? "" : ", ") + t;
  return s.empty() ? "none" : s;
}

// Refuses a policy that cannot be followed (xlaunch/wrap_policy.h), naming what the model has.
void check_policy(const torch::nn::Module& model, Walk& walk) {
  const WrapPolicy& p = walk.policy;
  const std::string policy = "acc.prepare at ddp.zero_stage 3: fsdp.wrap " + p.spelling() + " (XLAUNCH_FSDP_WRAP)";
  const std::string kinds = "the entries of a torch::nn::Sequential and the modules declared xlaunch::FullyShard<Block>";
  if ((p.kind == WrapPolicy::Kind::kType || p.kind == WrapPolicy::Kind::kName) && !walk.named_any)
    throw UsageError(policy + " names no module of the model that holds trainable parameters. " +
                     (p.kind == WrapPolicy::Kind::kType
                          ? "Its module types are: " + types_in(model, walk) + "."
                          : std::string("Paths are as named_modules() gives them (\"blocks.3\"); '*' matches any run of "
                                        "characters.")) +
                     " Name one of them, or set fsdp.wrap: auto (" + kinds + ")");
  if (!walk.named_not_candidate.empty())
    throw UsageError(policy + " names module " + walk.named_not_candidate + ", and xlaunch cannot see its calls: " +
                     "LibTorch has no module hooks, and a module calls its members itself, so units are " + kinds +
                     ". Declare it xlaunch::FullyShard<...> or hold it in a torch::nn::Sequential, or narrow fsdp.wrap "
                     "so that it does not name it (docs/memory.md)");
  if (p.kind == WrapPolicy::Kind::kSize && walk.unit_modules.empty())
    throw UsageError(policy + ": no unit candidate (" + kinds + ") holds " + std::to_string(p.min_params) +
                     " trainable parameters" +
                     (walk.largest.empty() ? std::string(": the model has none")
                                           : "; the largest, " + walk.largest + ", holds " +
                                                 std::to_string(walk.largest_size)) +
                     ". Lower the size, or set fsdp.wrap: none to gather the whole model as one unit");
}

}  // namespace

namespace detail {

void declare_unit(const std::shared_ptr<torch::nn::Module>& module) {
  std::lock_guard<std::mutex> lk(registry_mutex());
  for (auto it = declared().begin(); it != declared().end();) it = it->second.expired() ? declared().erase(it) : ++it;
  declared()[module.get()] = module;
}

UnitForward::UnitForward(const torch::nn::Module* module) {
  Units* units = Units::of(module, &unit_);
  if (!units) return;
  units->before_forward(unit_);
  units_ = units;
}

at::Tensor UnitForward::done(at::Tensor out) {
  if (!units_) return out;
  return static_cast<Units*>(units_)->after_forward(unit_, std::move(out));
}

bool UnitForward::recomputes() const { return units_ && static_cast<Units*>(units_)->recomputes(); }

at::Tensor UnitForward::recompute(std::vector<at::Tensor> inputs, Recomputable fn) {
  if (!units_) return fn(inputs);
  return static_cast<Units*>(units_)->recompute_forward(unit_, std::move(inputs), std::move(fn));
}

void UnitForward::cannot_recompute(const char* why) {
  if (units_) static_cast<Units*>(units_)->cannot_recompute(unit_, why);
}

}  // namespace detail

UnitPlan plan_units(const std::shared_ptr<torch::nn::Module>& model, const std::vector<at::Tensor>& params,
                    const std::vector<std::string>& names, const WrapPolicy& policy) {
  Walk walk(policy);
  for (size_t i = 0; i < params.size(); ++i) walk.index[params[i].unsafeGetTensorImpl()] = i;
  walk.visit(model, "");
  check_policy(*model, walk);
  // Which units reach each parameter.
  std::map<size_t, std::vector<size_t>> users;
  for (size_t u = 0; u < walk.unit_params.size(); ++u)
    for (size_t i : walk.unit_params[u]) users[i].push_back(u);
  UnitPlan plan;
  for (const auto& [i, us] : users)
    if (walk.root.count(i) && plan.root_param_in_unit.empty())
      plan.root_param_in_unit = "parameter '" + names[i] + "' belongs to the root unit and is used inside unit '" +
                                walk.unit_names[us[0]] + "'";
  for (const auto& [i, us] : users) {
    if (us.size() < 2 || walk.root.count(i)) continue;
    throw UsageError("acc.prepare at ddp.zero_stage 3: parameter '" + names[i] + "' is used by two units, '" +
                     walk.unit_names[us[0]] + "' and '" + walk.unit_names[us[1]] + "' (tied weights), and each unit "
                     "is gathered and freed on its own. Hold the shared module outside both units (a member of the "
                     "model itself: the root unit, whole for the whole step), or put both users in one unit");
  }
  std::vector<std::vector<size_t>> kept;
  for (size_t u = 0; u < walk.unit_params.size(); ++u) {
    std::vector<size_t> ids;
    for (size_t i : walk.unit_params[u])
      if (!walk.root.count(i)) ids.push_back(i);
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    if (ids.empty()) continue;  // all its parameters are the root's
    plan.modules.push_back(walk.unit_modules[u]);
    plan.names.push_back(walk.unit_names[u]);
    kept.push_back(std::move(ids));
  }
  // Buckets: the units in reverse (the order their backward ends), then the root.
  std::set<size_t> in_unit;
  for (size_t u = kept.size(); u-- > 0;) {
    plan.bucket.insert(plan.bucket.begin(), plan.buckets.size());
    plan.buckets.push_back(kept[u]);
    in_unit.insert(kept[u].begin(), kept[u].end());
  }
  std::vector<size_t> root;
  for (size_t i = 0; i < params.size(); ++i)
    if (!in_unit.count(i)) root.push_back(i);
  if (!root.empty()) {
    plan.root_bucket = static_cast<int>(plan.buckets.size());
    plan.buckets.push_back(std::move(root));
  }
  return plan;
}

// ---- around forward and backward ----------------------------------------------------------------

namespace {
// Identity on a unit's output; its backward, when the output's gradient arrives, gathers the unit
// for its own backward.
struct BeforeBackward : torch::autograd::Function<BeforeBackward> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, at::Tensor out, int64_t units, int64_t unit) {
    ctx->saved_data["units"] = units;
    ctx->saved_data["unit"] = unit;
    return out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* units = reinterpret_cast<Units*>(ctx->saved_data["units"].toInt());
    units->before_backward(static_cast<size_t>(ctx->saved_data["unit"].toInt()));
    return {grads[0], at::Tensor(), at::Tensor()};
  }
};
}  // namespace

// ---- activation checkpointing ------------------------------------------------------------------

namespace {

// The autograd node a recomputed unit's output hangs from (units.h).
class RecomputeUnit final : public torch::autograd::Node {
 public:
  RecomputeUnit(Units& units, size_t unit, detail::UnitForward::Recomputable fn, const std::vector<at::Tensor>& inputs)
      : units_(units), unit_(unit), fn_(std::move(fn)), context_(ForwardContext::captured(inputs)) {
    for (const at::Tensor& t : inputs) {
      saved_.emplace_back(t, /*is_output=*/false);
      requires_grad_.push_back(t.requires_grad());
    }
  }
  std::string name() const override { return "xlaunch::RecomputeUnit"; }
  // The unit's forward, without autograd; one that throws NotOneTensor leaves this thread's
  // generators and autocast as it found them, for the call made again without recomputation.
  at::Tensor forward(const std::vector<at::Tensor>& inputs) const {
    try {
      return fn_(inputs);
    } catch (const NotOneTensor&) {
      ForwardContext::put(context_);
      throw;
    }
  }
  void release_variables() override {
    saved_.clear();
    fn_ = nullptr;
  }
  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    if (!fn_)
      throw UsageError("backward through a unit of a model prepared at ddp.zero_stage 3 with fsdp."
                       "activation_checkpointing ran twice (retain_graph): a recomputed unit keeps nothing for a "
                       "second backward; run one backward per forward");
    if (at::GradMode::is_enabled())
      throw UsageError("a backward with create_graph (a gradient of gradients) reached unit '" + units_.plan().names[unit_] +
                       "', recomputed by fsdp.activation_checkpointing, whose backward builds no graph of its own. "
                       "Set fsdp.activation_checkpointing: false for higher-order gradients");
    units_.before_backward(unit_);
    std::vector<at::Tensor> inputs;
    for (torch::autograd::SavedVariable& v : saved_) {
      const at::Tensor t = v.unpack(shared_from_this());
      inputs.push_back(t.defined() ? t.detach().requires_grad_(requires_grad_[inputs.size()]) : t);
    }
    at::Tensor out;
    {
      const Replay replay(context_);
      const at::AutoGradMode with_grad(true);
      out = fn_(inputs);
    }
    const at::Tensor grad = grads.at(0).defined() ? grads[0] : input_metadata(0).zeros_like();
    if (out.requires_grad()) torch::autograd::backward({out}, {grad});
    release_variables();
    torch::autograd::variable_list out_grads;
    for (size_t k = 0; k < inputs.size(); ++k)
      out_grads.push_back(requires_grad_[k] && inputs[k].defined() ? inputs[k].grad() : at::Tensor());
    return out_grads;
  }

 private:
  Units& units_;
  size_t unit_;
  detail::UnitForward::Recomputable fn_;
  ForwardContext context_;
  std::vector<torch::autograd::SavedVariable> saved_;
  std::vector<bool> requires_grad_;
};

}  // namespace

at::Tensor Units::recompute_forward(size_t u, std::vector<at::Tensor> inputs, detail::UnitForward::Recomputable fn) {
  if (!at::GradMode::is_enabled()) return fn(inputs);
  auto node = std::shared_ptr<RecomputeUnit>(new RecomputeUnit(*this, u, std::move(fn), inputs),
                                             torch::autograd::deleteNode);
  node->set_next_edges(torch::autograd::collect_next_edges(inputs));
  at::Tensor out;
  {
    const at::NoGradGuard no_grad;
    out = node->forward(inputs);
  }
  if (!out.defined() || !(out.is_floating_point() || out.is_complex())) return out;  // no gradient to take
  // The output must be a tensor of its own to hang from the node: one returning an input, a
  // parameter or a view (of the gathered parameters, freed next) would hang that there.
  bool own = !out.requires_grad() && !out.is_view();
  for (const at::Tensor& t : inputs)
    if (t.defined() && t.is_alias_of(out)) own = false;
  if (!own) {
    const at::NoGradGuard no_grad;
    out = out.clone();
  }
  torch::autograd::create_gradient_edge(out, node);
  return out;
}

void Units::cannot_recompute(size_t u, const char* why) {
  std::lock_guard<std::mutex> lk(mu_);
  if (said_not_recomputed_[u]) return;
  said_not_recomputed_[u] = true;
  log_main(reducer_.rank(), "fsdp.activation_checkpointing: unit '" + plan_.names[u] + "' keeps its activations: " +
                                why + " (docs/memory.md)");
}

Units::Units(UnitPlan plan, Reducer& reducer, int prefetch, bool reshard_after_forward, bool recompute)
    : plan_(std::move(plan)),
      reducer_(reducer),
      prefetch_(prefetch),
      reshard_after_forward_(reshard_after_forward),
      recompute_(recompute),
      said_not_recomputed_(plan_.modules.size(), false) {
  for (size_t b = 0; b < plan_.buckets.size(); ++b)
    bytes_.push_back(static_cast<uint64_t>(reducer_.bucket_shard(b) * reducer_.shard_world()) * reducer_.gathered_element_size(b));
  std::lock_guard<std::mutex> lk(registry_mutex());
  for (size_t u = 0; u < plan_.modules.size(); ++u) live()[plan_.modules[u].get()] = {this, u};
}

Units::~Units() {
  std::lock_guard<std::mutex> lk(registry_mutex());
  for (auto it = live().begin(); it != live().end();) it = it->second.first == this ? live().erase(it) : ++it;
}

Units* Units::of(const torch::nn::Module* module, size_t* unit) {
  std::lock_guard<std::mutex> lk(registry_mutex());
  const auto it = live().find(module);
  if (it == live().end()) return nullptr;
  *unit = it->second.second;
  return it->second.first;
}

void Units::count_gather(size_t b) {
  if (reducer_.unit_whole(b)) return;
  reducer_.gather_unit(b);
  if (reducer_.shard_world() > 1) gathered_ += bytes_[b];
  uint64_t whole = 0;
  for (size_t k = 0; k < bytes_.size(); ++k)
    if (reducer_.unit_whole(k)) whole += bytes_[k];
  peak_whole_ = std::max(peak_whole_, whole);
}

uint64_t Units::take_gathered_bytes() {
  std::lock_guard<std::mutex> lk(mu_);
  const uint64_t out = gathered_;
  gathered_ = 0;
  return out;
}

void Units::gather(size_t u) { count_gather(plan_.bucket[u]); }

void Units::make_whole(size_t u) {
  gather(u);
  reducer_.wait_unit(plan_.bucket[u]);
}

std::vector<size_t> Units::next_units(size_t u, bool backward) const {
  std::vector<size_t> order = order_;
  if (order.empty())
    for (size_t k = 0; k < plan_.modules.size(); ++k) order.push_back(k);
  if (backward) std::reverse(order.begin(), order.end());
  std::vector<size_t> out;
  const auto at = std::find(order.begin(), order.end(), u);
  if (at == order.end()) return out;
  for (auto it = at + 1; it != order.end() && static_cast<int>(out.size()) < prefetch_; ++it)
    if (*it != u && std::find(out.begin(), out.end(), *it) == out.end()) out.push_back(*it);
  return out;
}

void Units::start_forward() {
  std::lock_guard<std::mutex> lk(mu_);
  reducer_.begin_step_script();  // what a rank whose data ended repeats (uneven inputs)
  if (!current_.empty()) order_ = std::move(current_);
  current_.clear();
  if (plan_.root_bucket >= 0) count_gather(static_cast<size_t>(plan_.root_bucket));
  // The first units' gathers run while the root computes (embeddings, say).
  if (prefetch_ > 0 && !plan_.modules.empty()) gather(order_.empty() ? 0 : order_.front());
  if (plan_.root_bucket >= 0) reducer_.wait_unit(static_cast<size_t>(plan_.root_bucket));
}

void Units::before_forward(size_t u) {
  std::lock_guard<std::mutex> lk(mu_);
  // The root is made whole by the prepared model's call (ForwardScope): a unit called while it is
  // not was reached around it, and the root's parameters would read as zeros.
  if (plan_.root_bucket >= 0 && !reducer_.unit_whole(static_cast<size_t>(plan_.root_bucket)))
    throw UsageError("unit '" + plan_.names[u] + "' of a model prepared at ddp.zero_stage 3 was called outside the "
                     "prepared model's forward, where the parameters outside its units (embeddings, norms, heads) "
                     "are not gathered and would read as zeros. Call the model through what acc.prepare returned "
                     "(model(x), not net->forward(x))");
  if (recompute_ && std::find(current_.begin(), current_.end(), u) != current_.end())
    throw UsageError("unit '" + plan_.names[u] + "' was called twice in one forward, and fsdp."
                     "activation_checkpointing recomputes each call in a backward of its own, where its parameters "
                     "would receive their gradients twice. Call each unit once per forward, or set fsdp."
                     "activation_checkpointing: false");
  current_.push_back(u);
  gather(u);
  for (size_t next : next_units(u, /*backward=*/false)) gather(next);
  reducer_.wait_unit(plan_.bucket[u]);
}

at::Tensor Units::after_forward(size_t u, at::Tensor out) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!reshard_after_forward_) return out;
  const bool backward_follows = out.requires_grad();
  reducer_.free_unit(plan_.bucket[u], /*keep_changes=*/false);
  if (!backward_follows) return out;
  // A recomputed unit's node gathers it itself.
  if (dynamic_cast<RecomputeUnit*>(out.grad_fn().get())) return out;
  return BeforeBackward::apply(out, reinterpret_cast<int64_t>(this), static_cast<int64_t>(u));
}

void Units::before_backward(size_t u) {
  std::lock_guard<std::mutex> lk(mu_);
  gather(u);
  for (size_t next : next_units(u, /*backward=*/true)) gather(next);
  reducer_.wait_unit(plan_.bucket[u]);
}

void Units::gather_all() {
  std::lock_guard<std::mutex> lk(mu_);
  for (size_t b = 0; b < plan_.buckets.size(); ++b) reducer_.gather_unit(b, /*exact=*/true);
  for (size_t b = 0; b < plan_.buckets.size(); ++b) reducer_.wait_unit(b);
}

void Units::free_all(bool keep_changes) {
  std::lock_guard<std::mutex> lk(mu_);
  for (size_t b = 0; b < plan_.buckets.size(); ++b) reducer_.free_unit(b, keep_changes);
}

void Units::gather_one(size_t bucket) {
  std::lock_guard<std::mutex> lk(mu_);
  reducer_.gather_unit(bucket, /*exact=*/true);
  reducer_.wait_unit(bucket);
}

void Units::free_one(size_t bucket) {
  std::lock_guard<std::mutex> lk(mu_);
  reducer_.free_unit(bucket, /*keep_changes=*/false);
}

}  // namespace xlaunch
