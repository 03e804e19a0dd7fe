// Private to the environment pool: its decisions, as pure functions (tests/rl/pool_plan_test.cpp):
// how many threads, which core each is pinned to, how a synchronous step splits the environments
// among the threads, how many batches an asynchronous pool keeps, and where each field of a batch
// lies in the batch's one buffer.
#pragma once

#include <cstdint>
#include <vector>

namespace xlaunch::rl::detail {

// The default num_threads: this rank's share of the cores it may run on (usable_cores, from
// sched_getaffinity, divided among the local_ranks of its machine), at least 1, at most num_envs.
int default_num_threads(int usable_cores, int local_ranks, int64_t num_envs);

// With thread_affinity_offset >= 0: the position, in the list of cores this process may use, of
// the core that thread `thread` is pinned to.
int pinned_core_index(int offset, int thread, int usable_cores);

// A synchronous step: environments [begin, end) go to one thread.
struct Chunk {
  int64_t begin = 0, end = 0;
  bool operator==(const Chunk& o) const { return begin == o.begin && end == o.end; }
};

// Environments 0..num_envs-1 in num_threads contiguous chunks whose sizes differ by at most one (the
// larger first), in environment order. Chunk 0 is stepped by the calling thread, chunk t >= 1 by
// worker t-1: a synchronous step wakes num_threads - 1 workers, and none with one thread.
std::vector<Chunk> split_envs(int64_t num_envs, int num_threads);

// An asynchronous pool's ring of output batches: rows are claimed in order, at most num_envs are
// claimed and not yet received, and a batch is received whole, so ceil(num_envs / batch_size)
// batches hold every claimed row.
int64_t async_batches(int64_t num_envs, int64_t batch_size);

// Where the fields of a batch of `rows` rows lie in its one byte buffer (each 64-byte aligned, so
// one copy moves the whole batch to a device and the fields are views of it). final_obs < 0: none.
struct BatchLayout {
  int64_t obs = 0, reward = 0, terminated = 0, truncated = 0, env_id = 0, final_obs = -1;
  int64_t bytes = 0;
};
BatchLayout batch_layout(int64_t rows, int64_t obs_numel, bool with_final_obs);

}  // namespace xlaunch::rl::detail
