#include "state/snapshots.h"

#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <memory>
#include <typeinfo>
#include <vector>

#include "optim/master_state.h"
#include "state/safetensors_format.h"
#include "state/training_run_parts.h"
#include "xlaunch/lion.h"

namespace xlaunch::checkpoint {
namespace {

// A copy in host memory (a clone on the CPU); undefined stays undefined (a momentum buffer before
// the first step).
at::Tensor host_copy(const at::Tensor& t) {
  return t.defined() ? t.detach().to(at::kCPU, /*non_blocking=*/false, /*copy=*/true) : t;
}

void copy_tensors(torch::optim::SGDParamState& s) { s.momentum_buffer(host_copy(s.momentum_buffer())); }

template <class AdamState>
void copy_adam_tensors(AdamState& s) {
  s.exp_avg(host_copy(s.exp_avg()));
  s.exp_avg_sq(host_copy(s.exp_avg_sq()));
  s.max_exp_avg_sq(host_copy(s.max_exp_avg_sq()));
}
void copy_tensors(torch::optim::AdamParamState& s) { copy_adam_tensors(s); }
void copy_tensors(torch::optim::AdamWParamState& s) { copy_adam_tensors(s); }
void copy_tensors(torch::optim::AdagradParamState& s) { s.sum(host_copy(s.sum())); }
void copy_tensors(optim::LionParamState& s) { s.exp_avg(host_copy(s.exp_avg())); }
void copy_tensors(torch::optim::RMSpropParamState& s) {
  s.square_avg(host_copy(s.square_avg()));
  s.momentum_buffer(host_copy(s.momentum_buffer()));
  s.grad_avg(host_copy(s.grad_avg()));
}

template <class Opt, class Options, class State>
Producer snapshot_as(const torch::optim::Optimizer& opt) {
  // The type itself, not a subclass, whose save() may write more than Opt's.
  if (typeid(opt) != typeid(Opt)) return {};
  std::vector<torch::optim::OptimizerParamGroup> groups;
  for (const auto& g : opt.param_groups()) groups.emplace_back(g.params(), g.options().clone());
  auto shadow = std::make_shared<Opt>(groups, static_cast<const Options&>(opt.defaults()));
  for (const auto& [key, state] : opt.state()) {
    // Through clone(), which keeps a state's class: one with master weights (optim/master_state.h)
    // copies them too.
    std::unique_ptr<torch::optim::OptimizerParamState> copy = state->clone();
    copy_tensors(static_cast<State&>(*copy));
    if (at::Tensor* master = optim::master_of(*copy)) *master = host_copy(*master);
    shadow->state()[key] = std::move(copy);
  }
  return [shadow] { return archive_bytes([&](auto& ar) { shadow->save(ar); }); };
}

std::shared_ptr<NamedTensors> host_copies(const NamedTensors& tensors) {
  auto copies = std::make_shared<NamedTensors>();
  for (const auto& [name, t] : tensors) copies->emplace_back(name, host_copy(t));
  return copies;
}

}  // namespace

Producer pickle_snapshot(const NamedTensors& tensors) {
  return [copies = host_copies(tensors)] { return pickle_bytes(*copies); };
}

Producer safetensors_snapshot(const NamedTensors& tensors) {
  return [copies = host_copies(tensors)] { return safetensors::file_bytes(*copies); };
}

Producer optimizer_snapshot(const torch::optim::Optimizer& opt) {
  using namespace torch::optim;
  for (const auto& make : {snapshot_as<AdamW, AdamWOptions, AdamWParamState>, snapshot_as<Adam, AdamOptions, AdamParamState>,
                           snapshot_as<SGD, SGDOptions, SGDParamState>, snapshot_as<Adagrad, AdagradOptions, AdagradParamState>,
                           snapshot_as<RMSprop, RMSpropOptions, RMSpropParamState>,
                           snapshot_as<optim::Lion, optim::LionOptions, optim::LionParamState>})
    if (Producer p = make(opt)) return p;
  return {};
}

}  // namespace xlaunch::checkpoint
