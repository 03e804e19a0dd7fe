// For tests: a TensorEnv whose built-in environment takes the generic step in tensor operations
// instead of the fused rows, so the two can be compared bitwise.
#pragma once

#include <memory>

#include "xlaunch/rl/tensor_env.h"

namespace xlaunch::rl::detail {

struct TensorEnvAccess {
  static std::unique_ptr<TensorEnv> generic(TensorEnvOptions options);
};

}  // namespace xlaunch::rl::detail
