// Units of a model at ddp.zero_stage 3 (fully sharded data parallelism, docs/memory.md).
//
// At stage 3 each rank keeps only its shard of every parameter between uses. The model is cut into
// units, each gathered whole for its forward and for its backward and freed after each:
//  - every entry of a torch::nn::Sequential that holds trainable parameters (acc.prepare reseats
//    the Sequential's entries, whose forward goes through the Sequential);
//  - every module declared as xlaunch::FullyShard<Block> below, wherever it sits: a plain member
//    (`xlaunch::FullyShard<Block> block{nullptr};`), or one of a std::vector of them. LibTorch has
//    no module hooks, and a module calls its members itself, so a member is a unit only when its
//    calls go through FullyShard;
//  - what is left (embeddings, a final norm, a head) is the root unit, gathered for the whole step.
// A unit inside a unit is part of the outer one. ModuleList and ModuleDict entries are called by
// the user's own code, so they are units when declared as FullyShard. The wrap policy (fsdp.wrap,
// xlaunch/wrap_policy.h) chooses among these by type, path or size; by default all are units.
//
// FullyShard<Block> is a Block (the module holder): construct it with Block's arguments, call it,
// reach the module with ->. Called through the holder (block(x) or block.forward(x)) it gathers the
// unit first; called through -> it does not. At other stages, and before acc.prepare, it is Block.
//
// With fsdp.activation_checkpointing a unit's call keeps only its inputs for backward, and the unit
// runs again in its backward. That needs a call whose arguments are tensors or numbers and whose
// result is one tensor (a Sequential entry: tensors in, one tensor out); other calls keep their
// activations, and the first of them says so once.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace xlaunch {

namespace detail {

// Marks `module` as a unit for every acc.prepare at stage 3 (FullyShard's constructors).
void declare_unit(const std::shared_ptr<torch::nn::Module>& module);

// Around one call of a unit's forward: the constructor makes the unit's parameters whole (waiting
// for its gather, starting the next units' gathers); done() frees them again (fsdp.
// reshard_after_forward) and has the output's gradient gather them before the unit's backward. A
// unit whose output is no single tensor keeps its parameters until its backward. Nothing at all
// for a module that is no unit of a model prepared at stage 3.
class UnitForward {
 public:
  explicit UnitForward(const torch::nn::Module* module);
  UnitForward(const UnitForward&) = delete;
  UnitForward& operator=(const UnitForward&) = delete;
  at::Tensor done(at::Tensor out);
  template <class T>
  std::decay_t<T> done_any(T&& out) {
    if constexpr (std::is_same_v<std::decay_t<T>, at::Tensor>) return done(std::forward<T>(out));
    else return std::forward<T>(out);  // not freed: whole until its reduce-scatter
  }

  // fsdp.activation_checkpointing is on, for this unit of a prepared model.
  bool recomputes() const;
  // The unit's output, fn(inputs), keeping only `inputs` for backward, where fn runs again (with
  // the random generators and autocast as they were) before the unit's gradients are computed.
  // Without gradients (no_grad, eval) it is fn(inputs).
  using Recomputable = std::function<at::Tensor(const std::vector<at::Tensor>&)>;
  at::Tensor recompute(std::vector<at::Tensor> inputs, Recomputable fn);
  // A call that recomputes() but cannot be recomputed (`why`): said once per unit.
  void cannot_recompute(const char* why);

 private:
  void* units_ = nullptr;  // ddp/units.h
  size_t unit_ = 0;
};

template <class T>
constexpr bool kRecomputableArgument = std::is_same_v<std::decay_t<T>, at::Tensor> ||
                                       std::is_arithmetic_v<std::decay_t<T>> || std::is_enum_v<std::decay_t<T>>;

// module->forward(args...) through unit.recompute(): the arguments are held by value, the tensors
// among them replaced by what recompute() passes.
template <class Module, class... Args>
at::Tensor recompute_forward(UnitForward& unit, std::shared_ptr<Module> module, Args&&... args) {
  std::tuple<std::decay_t<Args>...> held(std::forward<Args>(args)...);
  std::vector<at::Tensor> inputs;
  std::apply(
      [&](const auto&... a) {
        ([&](const auto& x) {
          if constexpr (std::is_same_v<std::decay_t<decltype(x)>, at::Tensor>) inputs.push_back(x);
        }(a), ...);
      },
      held);
  return unit.recompute(std::move(inputs), [module = std::move(module), held](const std::vector<at::Tensor>& ts) {
    auto call = held;
    size_t k = 0;
    std::apply(
        [&](auto&... a) {
          ([&](auto& x) {
            if constexpr (std::is_same_v<std::decay_t<decltype(x)>, at::Tensor>) x = ts[k++];
          }(a), ...);
        },
        call);
    return std::apply([&](auto&... a) -> at::Tensor { return module->forward(a...); }, call);
  });
}

}  // namespace detail

template <class Holder>
class FullyShard : public Holder {
 public:
  FullyShard(std::nullptr_t) : Holder(nullptr) {}  // NOLINT: as a module holder
  FullyShard(Holder module) : Holder(std::move(module)) { declare(); }  // NOLINT: as a module holder
  // register_module's result.
  FullyShard(std::shared_ptr<typename Holder::ContainedType> module)  // NOLINT: as a module holder
      : Holder(std::move(module)) {
    declare();
  }
  template <class... Args,
            typename = std::enable_if_t<std::is_constructible_v<Holder, Args&&...> &&
                                        !(sizeof...(Args) == 1 &&
                                          ((std::is_base_of_v<Holder, std::decay_t<Args>> ||
                                            std::is_convertible_v<std::decay_t<Args>,
                                                                  std::shared_ptr<typename Holder::ContainedType>>) ||
                                           ...))>>
  explicit FullyShard(Args&&... args) : Holder(std::forward<Args>(args)...) {
    declare();
  }

  template <class... Args>
  auto operator()(Args&&... args) {
    return forward(std::forward<Args>(args)...);
  }
  template <class... Args>
  auto forward(Args&&... args) {
    detail::UnitForward unit(this->get());
    using Out = std::decay_t<decltype(this->get()->forward(std::forward<Args>(args)...))>;
    if (unit.recomputes()) {
      if constexpr (std::is_same_v<Out, at::Tensor> && (detail::kRecomputableArgument<Args> && ...))
        return unit.done(detail::recompute_forward(unit, this->ptr(), std::forward<Args>(args)...));
      else
        unit.cannot_recompute("its forward takes arguments other than tensors and numbers, or returns other than "
                              "one tensor");
    }
    return unit.done_any(this->get()->forward(std::forward<Args>(args)...));
  }

 private:
  void declare() {
    if (!this->is_empty()) detail::declare_unit(this->ptr());
  }
};

}  // namespace xlaunch
