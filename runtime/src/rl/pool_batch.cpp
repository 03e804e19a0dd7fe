#include "rl/pool_batch.h"

namespace xlaunch::rl::detail {
namespace {

at::Tensor field(const at::Tensor& bytes, int64_t offset, int64_t elements, at::ScalarType dtype,
                 at::IntArrayRef shape) {
  return bytes.narrow(0, offset, elements * static_cast<int64_t>(c10::elementSize(dtype))).view(dtype).view(shape);
}

}  // namespace

BatchShape::BatchShape(int64_t rows_, std::vector<int64_t> obs_shape_, bool with_final_obs)
    : rows(rows_), obs_shape(std::move(obs_shape_)), obs_numel(1) {
  for (int64_t d : obs_shape) obs_numel *= d;
  layout = batch_layout(rows, obs_numel, with_final_obs);
}

void BatchSlot::allocate(const xlaunch::detail::DeviceStage& stage, const BatchShape& shape) {
  bytes = stage.host_empty({shape.layout.bytes}, at::kByte);
  auto* base = bytes.data_ptr<uint8_t>();
  const BatchLayout& l = shape.layout;
  obs = reinterpret_cast<float*>(base + l.obs);
  reward = reinterpret_cast<float*>(base + l.reward);
  terminated = reinterpret_cast<bool*>(base + l.terminated);
  truncated = reinterpret_cast<bool*>(base + l.truncated);
  env_id = reinterpret_cast<int64_t*>(base + l.env_id);
  final_obs = l.final_obs >= 0 ? reinterpret_cast<float*>(base + l.final_obs) : nullptr;
  rows.resize(shape.rows);
}

EnvBatch BatchSlot::take(const xlaunch::detail::DeviceStage& stage, const BatchShape& shape, int64_t* env_steps) {
  EnvBatch b;
  int64_t steps = 0;
  for (int64_t r = 0; r < shape.rows; ++r) {
    const RowInfo& info = rows[r];
    steps += info.stepped;
    if (info.episode_length > 0) b.episodes.push_back({env_id[r], info.episode_return, info.episode_length});
  }
  *env_steps += steps;
  at::Tensor moved = std::move(bytes);
  stage.hand_over({&moved}, stage.start_copy({&moved}));
  const BatchLayout& l = shape.layout;
  const int64_t n = shape.rows;
  std::vector<int64_t> obs_sizes{n};
  obs_sizes.insert(obs_sizes.end(), shape.obs_shape.begin(), shape.obs_shape.end());
  b.obs = field(moved, l.obs, n * shape.obs_numel, at::kFloat, obs_sizes);
  b.reward = field(moved, l.reward, n, at::kFloat, {n});
  b.terminated = field(moved, l.terminated, n, at::kBool, {n});
  b.truncated = field(moved, l.truncated, n, at::kBool, {n});
  b.env_id = field(moved, l.env_id, n, at::kLong, {n});
  if (l.final_obs >= 0) b.final_obs = field(moved, l.final_obs, n * shape.obs_numel, at::kFloat, obs_sizes);
  allocate(stage, shape);
  return b;
}

}  // namespace xlaunch::rl::detail
