#include "rl/pool_plan.h"

#include <algorithm>

namespace xlaunch::rl::detail {

int default_num_threads(int usable_cores, int local_ranks, int64_t num_envs) {
  const int share = usable_cores / std::max(local_ranks, 1);
  return static_cast<int>(std::clamp<int64_t>(share, 1, std::max<int64_t>(num_envs, 1)));
}

int pinned_core_index(int offset, int thread, int usable_cores) {
  return static_cast<int>((static_cast<int64_t>(offset) + thread) % usable_cores);
}

std::vector<Chunk> split_envs(int64_t num_envs, int num_threads) {
  std::vector<Chunk> chunks(num_threads);
  const int64_t base = num_envs / num_threads, extra = num_envs % num_threads;
  int64_t begin = 0;
  for (int t = 0; t < num_threads; ++t) {
    const int64_t size = base + (t < extra ? 1 : 0);
    chunks[t] = {begin, begin + size};
    begin += size;
  }
  return chunks;
}

int64_t async_batches(int64_t num_envs, int64_t batch_size) { return (num_envs + batch_size - 1) / batch_size; }

BatchLayout batch_layout(int64_t rows, int64_t obs_numel, bool with_final_obs) {
  BatchLayout l;
  int64_t at = 0;
  const auto place = [&](int64_t bytes) {
    const int64_t offset = at;
    at += (bytes + 63) / 64 * 64;
    return offset;
  };
  l.obs = place(rows * obs_numel * 4);
  l.reward = place(rows * 4);
  l.terminated = place(rows);
  l.truncated = place(rows);
  l.env_id = place(rows * 8);
  if (with_final_obs) l.final_obs = place(rows * obs_numel * 4);
  l.bytes = at;
  return l;
}

}  // namespace xlaunch::rl::detail
