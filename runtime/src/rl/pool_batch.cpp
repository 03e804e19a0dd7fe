#include "rl/pool_batch.h"

namespace xlaunch::rl::detail {
namespace {

// A tensor over `elements` of `dtype` at `offset` bytes into `bytes` (aligned: batch_layout), sharing
// its storage. Made directly rather than through narrow/view/view: those are three dispatched ops
// per field, and with six fields they were most of a small batch's hand-over.
at::Tensor field(const at::Tensor& bytes, int64_t offset, at::ScalarType dtype, at::IntArrayRef shape) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(c10::Storage(bytes.storage()), bytes.key_set(),
                                                   c10::scalarTypeToTypeMeta(dtype));
  impl->set_storage_offset(offset / static_cast<int64_t>(c10::elementSize(dtype)));
  impl->set_sizes_contiguous(shape);
  return at::Tensor(std::move(impl));
}

}  // namespace

BatchShape::BatchShape(int64_t rows_, std::vector<int64_t> obs_shape_, bool with_final_obs)
    : rows(rows_), obs_shape(std::move(obs_shape_)), obs_numel(1) {
  for (int64_t d : obs_shape) obs_numel *= d;
  layout = batch_layout(rows, obs_numel, with_final_obs);
}

void BatchSlot::allocate(const xlaunch::detail::DeviceStage& stage, const BatchShape& shape) {
  use(stage.host_empty({shape.layout.bytes}, at::kByte), shape);
}

void BatchSlot::use(at::Tensor buffer, const BatchShape& shape) {
  bytes = std::move(buffer);
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
  // What can throw comes first (the next buffer, the copy): until the end the slot still holds
  // this batch's buffer, so its row pointers never dangle.
  at::Tensor next = stage.host_empty({shape.layout.bytes}, at::kByte);
  at::Tensor moved = bytes;
  stage.hand_over({&moved}, stage.start_copy({&moved}));
  *env_steps += steps;
  const BatchLayout& l = shape.layout;
  const int64_t n = shape.rows;
  std::vector<int64_t> obs_sizes{n};
  obs_sizes.insert(obs_sizes.end(), shape.obs_shape.begin(), shape.obs_shape.end());
  b.obs = field(moved, l.obs, at::kFloat, obs_sizes);
  b.reward = field(moved, l.reward, at::kFloat, {n});
  b.terminated = field(moved, l.terminated, at::kBool, {n});
  b.truncated = field(moved, l.truncated, at::kBool, {n});
  b.env_id = field(moved, l.env_id, at::kLong, {n});
  if (l.final_obs >= 0) b.final_obs = field(moved, l.final_obs, at::kFloat, obs_sizes);
  use(std::move(next), shape);
  return b;
}

}  // namespace xlaunch::rl::detail
