// The built-in tensor environments' rows on the CPU (kernels/include/xlaunch/kernels/env_rows.h):
// the fused step over every row on the intra-op threads, and the row loops behind the built-ins'
// TensorEnvironment calls (the generic step, which tests compare with the fused one). Raw pointers,
// no tensors: tensor_rows_cpu.cpp is compiled with OpenMP and without contraction, apart from the
// rest of the pool.
#pragma once

#include <cstdint>

#include "xlaunch/kernels/env_rows.h"

namespace xlaunch::rl::detail {

using kernels::env_rows::EnvKind;
using kernels::env_rows::Frame;

// What TensorEnv needs to know of a built-in environment (its spec is the thread pool's: make_env).
struct RowsTraits {
  EnvKind kind;
  const char* id;
  int state, obs, actions;  // actions: Discrete(n), or 0 for a Box of one element
};
// The built-in environments, in EnvKind order.
const RowsTraits* rows_traits(int64_t* count);

// Every row's step (start == false) or new episode (start == true), as one parallel loop. Returns
// how many rows had an action out of range (stepped clamped, as on a GPU; TensorEnv checks actions
// before the step on the CPU, so 0 there).
int64_t cpu_rows(EnvKind kind, const Frame& frame, int64_t n, bool start);
// The rows where mask[i] start an episode (state and draws only).
void cpu_reset_rows(EnvKind kind, float* state, const uint64_t* key, int64_t* counter, const bool* mask, int64_t n);
// Every row's dynamics alone (no time limit, no reset): reward and terminated per row.
void cpu_step_rows(EnvKind kind, float* state, const int64_t* action, const float* box, int64_t n, float* reward,
                   bool* terminated);
// Every row's observation.
void cpu_observe_rows(EnvKind kind, const float* state, float* obs, int64_t n);

}  // namespace xlaunch::rl::detail
