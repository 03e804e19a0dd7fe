// Master weights in the optimizer's state (master_state.h).
#include "optim/master_state.h"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/input-archive.h>

#include <string>

#include "xlaunch/lion.h"

namespace xlaunch::optim {
namespace {

template <class State>
bool attach_as(std::unique_ptr<torch::optim::OptimizerParamState>& state, at::Tensor& master) {
  auto* plain = dynamic_cast<State*>(state.get());
  if (!plain) return false;
  if (auto* with = dynamic_cast<WithMaster<State>*>(plain)) {
    with->master = std::move(master);
    return true;
  }
  auto replaced = std::make_unique<WithMaster<State>>(*plain);
  replaced->master = std::move(master);
  state = std::move(replaced);
  return true;
}

int64_t int_of(torch::serialize::InputArchive& archive, const std::string& key) {
  at::Tensor t;
  archive.read(key, t);
  return t.item<int64_t>();
}

}  // namespace

at::Tensor* master_of(torch::optim::OptimizerParamState& state) {
  auto* m = dynamic_cast<MasterWeights*>(&state);
  return m ? &m->master : nullptr;
}

bool attach_master(std::unique_ptr<torch::optim::OptimizerParamState>& state, at::Tensor master) {
  return attach_as<torch::optim::AdamWParamState>(state, master) || attach_as<torch::optim::AdamParamState>(state, master) ||
         attach_as<torch::optim::SGDParamState>(state, master) || attach_as<LionParamState>(state, master);
}

size_t restore_masters(torch::optim::Optimizer& optimizer, torch::serialize::InputArchive& archive) {
  torch::serialize::InputArchive states, groups;
  if (!archive.try_read("state", states) || !archive.try_read("param_groups", groups)) return 0;
  size_t restored = 0;
  auto& mine = optimizer.param_groups();
  const int64_t saved_groups = int_of(groups, "param_groups/size");
  for (int64_t g = 0; g < saved_groups && g < static_cast<int64_t>(mine.size()); ++g) {
    torch::serialize::InputArchive group;
    groups.read("param_groups/" + std::to_string(g), group);
    const auto& params = mine[static_cast<size_t>(g)].params();
    const int64_t n = int_of(group, "params/size");
    for (int64_t k = 0; k < n && k < static_cast<int64_t>(params.size()); ++k) {
      c10::IValue key;
      group.read("params/" + std::to_string(k), key);
      torch::serialize::InputArchive one;
      at::Tensor master;
      if (!states.try_read(key.toStringRef(), one) || !one.try_read("master", master) || !master.defined()) continue;
      const at::Tensor& p = params[static_cast<size_t>(k)];
      if (p.scalar_type() != at::kBFloat16 && p.scalar_type() != at::kHalf) continue;  // float32 now: no master
      auto it = optimizer.state().find(p.unsafeGetTensorImpl());
      if (it == optimizer.state().end()) continue;
      if (attach_master(it->second, master.to(p.device(), at::kFloat).reshape(p.sizes()).contiguous())) ++restored;
    }
  }
  return restored;
}

}  // namespace xlaunch::optim
