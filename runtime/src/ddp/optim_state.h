// An optimizer's per-parameter state as named values, whatever the optimizer: read through the
// state's own serialize(), so it has the keys that optimizer writes (SGD "momentum_buffer"; Adam and
// AdamW "step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"; RMSprop "step", "square_avg", ...; Adagrad
// "step", "sum"). Sharded optimizers (ZeRO, docs/memory.md) count, save and re-slice state this way
// without knowing the optimizer's type.
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace xlaunch {

using StateEntries = std::vector<std::pair<std::string, c10::IValue>>;

// Every entry of an archive one parameter's state was written to, in its order.
StateEntries entries_of(torch::serialize::InputArchive& archive);
// The entries one parameter's state writes, in the order it writes them.
StateEntries state_entries(const torch::optim::OptimizerParamState& state);
// The bytes of every tensor in the optimizer's state (this process's, all parameters).
int64_t state_bytes(const torch::optim::Optimizer& optimizer);

}  // namespace xlaunch
