// Float32 master weights of a 16-bit parameter (docs/performance.md#16-bit-parameters-float32-master-weights),
// kept in the optimizer's own per-parameter state: the fused step (fused_step.h) stepping a
// bfloat16 or float16 parameter keeps its state in float32 and the parameter's float32 copy beside
// it, and writes the parameter as that copy rounded.
//
// The state is the optimizer's own state class with one tensor more, `master`, which its
// serialize() writes beside the others: LibTorch's save() and xlaunch's sharded checkpoints
// (ddp/optim_state.h reads states through serialize()) carry it without knowing it. LibTorch's
// load() makes its own state class and drops the key, so a load that should keep the masters calls
// restore_masters() after it (state/run_load.cpp does).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

#include <memory>

namespace xlaunch::optim {

// The part every state with a master shares.
struct MasterWeights {
  at::Tensor master;  // float32, the parameter's shape
  virtual ~MasterWeights() = default;
};

// `State` (SGDParamState, AdamParamState, AdamWParamState, LionParamState) with a master.
template <class State>
class WithMaster : public State, public MasterWeights {
 public:
  WithMaster() = default;
  explicit WithMaster(const State& state) : State(state) {}
  std::unique_ptr<torch::optim::OptimizerParamState> clone() const override {
    return std::make_unique<WithMaster>(*this);
  }
  void serialize(torch::serialize::OutputArchive& archive) const override {
    State::serialize(archive);
    if (master.defined()) archive.write("master", master);
  }
  void serialize(torch::serialize::InputArchive& archive) override {
    State::serialize(archive);
    archive.try_read("master", master);
  }
};

// The state's master, or null when it has none.
at::Tensor* master_of(torch::optim::OptimizerParamState& state);

// Gives `state` (of one of the four kinds above, for a parameter of type SGD, Adam, AdamW or Lion)
// the master `master`: the same state, of the class with a master. Returns false for another kind.
bool attach_master(std::unique_ptr<torch::optim::OptimizerParamState>& state, at::Tensor master);

// After optimizer.load(archive): gives each parameter whose saved state had a master that master
// again (LibTorch's load reads the states through their own class, which has none). Parameters are
// matched as LibTorch's load matches them, by position in their group; a parameter that is not
// 16-bit (now) gets none. Returns how many masters it restored.
size_t restore_masters(torch::optim::Optimizer& optimizer, torch::serialize::InputArchive& archive);

}  // namespace xlaunch::optim
