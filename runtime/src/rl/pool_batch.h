// Private to the environment pool: one output batch while the pool's threads write its rows. All
// fields of a batch live in one host buffer (batch_layout, pool_plan.h; pinned when the device is a
// GPU), so the hand-over is one copy to the device, and the EnvBatch tensors are views of it. After
// each hand-over the slot gets a fresh buffer: a returned batch is never written again.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <cstdint>
#include <vector>

#include "data/loader_stage.h"
#include "rl/pool_plan.h"
#include "xlaunch/rl/env_pool.h"

namespace xlaunch::rl::detail {

// The shape of every batch of a pool.
struct BatchShape {
  BatchShape(int64_t rows, std::vector<int64_t> obs_shape, bool with_final_obs);
  int64_t rows;
  std::vector<int64_t> obs_shape;  // one environment's observation
  int64_t obs_numel;
  BatchLayout layout;
};

// What the training thread needs from a row besides its tensors.
struct RowInfo {
  double episode_return = 0;
  int64_t episode_length = 0;  // 0: no episode ended in this row
  bool stepped = false;        // a step (counts in env_steps()), not a reset
};

struct BatchSlot {
  // A fresh host buffer for the next batch, and the pointers rows are written through.
  void allocate(const xlaunch::detail::DeviceStage& stage, const BatchShape& shape);
  // Makes `buffer` (layout.bytes of host memory) the slot's buffer.
  void use(at::Tensor buffer, const BatchShape& shape);
  // On the training thread, once every row is written: the batch (moved to the device by `stage`),
  // with its finished episodes in row order; adds its steps to *env_steps; then allocates afresh.
  // When it throws (no memory, a failed copy), the slot still holds this batch.
  EnvBatch take(const xlaunch::detail::DeviceStage& stage, const BatchShape& shape, int64_t* env_steps);

  at::Tensor bytes;  // the host buffer
  float* obs = nullptr;
  float* reward = nullptr;
  bool* terminated = nullptr;
  bool* truncated = nullptr;
  int64_t* env_id = nullptr;
  float* final_obs = nullptr;  // null without Autoreset::SameStep
  std::vector<RowInfo> rows;

  // Asynchronous pools: which batch (in the order of the pool's batches) this slot holds now, set
  // by the training thread after allocate() (a worker that claimed a row of batch k acquires it
  // before writing), and how many of its rows are written.
  alignas(64) std::atomic<int64_t> batch{-1};
  alignas(64) std::atomic<int64_t> written{0};
};

}  // namespace xlaunch::rl::detail
