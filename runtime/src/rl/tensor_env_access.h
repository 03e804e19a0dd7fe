// For tests: a TensorEnv whose built-in environment takes the generic step in tensor operations
// instead of the fused rows (generic), so the two can be compared bitwise; and one that runs on the
// CPU as on a GPU (device_like): actions counted and clamped instead of checked, episodes kept in
// the device ring, so that the GPU's bookkeeping is tested where no GPU is.
#pragma once

#include <memory>

#include "xlaunch/rl/tensor_env.h"

namespace xlaunch::rl::detail {

struct TensorEnvAccess {
  static std::unique_ptr<TensorEnv> make(TensorEnvOptions options, bool generic, bool device_like);
  static std::unique_ptr<TensorEnv> generic(TensorEnvOptions options) { return make(std::move(options), true, false); }
};

}  // namespace xlaunch::rl::detail
