// The built-in tensor environments' rows on a GPU: env_rows.cu's kernel on the current stream.
#pragma once

#include <ATen/core/Tensor.h>

#include "xlaunch/kernels/env_rows.h"

namespace xlaunch::rl::detail {

// start: every row starts an episode, else every row steps; bad_actions: an int64 [1] tensor on the
// same device, counting the actions that were out of range. Throws CallError naming a failed launch.
void cuda_rows(kernels::env_rows::EnvKind kind, const kernels::env_rows::Frame& frame, int64_t n, bool start,
               const at::Tensor& bad_actions);

}  // namespace xlaunch::rl::detail
