// Which samples each rank reads in an epoch: a pure function of (dataset size, rank, world size,
// seed, epoch, shuffle, drop_last), so every rank derives its shard without communication.
//
// The layout is PyTorch's torch.utils.data.DistributedSampler, index for index (the tests pin
// literal values produced by PyTorch): the epoch's permutation is randperm(n) drawn from a CPU
// generator seeded with seed + epoch (or 0..n-1 without shuffle); it is padded by wrapping
// around to a multiple of the world size (even batches, the default), or cut down to one
// (drop_last); rank r takes the positions r, r + world, r + 2*world, ... of that list.
//
// Why strided shards: global position p = local_position * world + rank, so the padded positions
// (p >= n, fewer than world of them) are all at the last local position of a rank's shard, hence
// in its last batch, and gathering the same batch from every rank in rank order and interleaving
// gives consecutive global positions. gather_for_metrics (metrics.h) relies on both.
//
// Starting an epoch part-way (resuming a checkpoint on another world size): after k batches of b
// on W ranks, the ranks together have read exactly the positions [0, k*b*W) of the epoch's list,
// whatever W is. An epoch started at offset P deals the remaining positions P, P+1, ... the same
// way: rank r takes P + r, P + r + world, ...; the padding (or the cut, with drop_last) evens out
// the n - P remaining positions over the world, and padded positions p >= n still wrap around to
// the list's first entries. So every remaining sample is read exactly once, on any world size, and
// an offset that is a multiple of the world size gives exactly the tail of the epoch at offset 0.
#pragma once

#include <cstdint>
#include <vector>

namespace xlaunch {

struct SamplerOptions {
  int64_t dataset_size = 0;
  int rank = 0;
  int world_size = 1;
  uint64_t seed = 0;
  bool shuffle = true;
  // false (even batches): every rank gets ceil(n / world) samples, the list padded by repeating
  // its first entries. true: every rank gets floor(n / world) samples, the tail is not read.
  bool drop_last = false;
  // false (Accelerate's even_batches=False): no padding; rank r gets the positions r, r + world, ...
  // below n, so shards differ by at most one sample and every sample is read exactly once. Ranks
  // may then run different numbers of batches (the Accelerator joins them: docs/data-loading.md).
  // Without effect with drop_last, whose shards are already even.
  bool even_batches = true;
};

// Where a run of consecutive shard positions of one rank sits in the epoch's global list; what
// gather_for_metrics needs to tell real samples from padding. The same on every rank for the
// same batch number.
// Shard position j of rank r is global position offset + j * world_size + r.
struct ShardSpan {
  int64_t first_position = 0;  // the first row's position in this rank's shard (batch k: k * batch)
  int64_t real_positions = 0;  // global positions below this are real samples; the rest padding
  int world_size = 1;
  int64_t offset = 0;  // the global position of shard position 0: 0, or where a resumed epoch started
};

class DistributedSampler {
 public:
  // Throws UsageError when rank is outside [0, world_size) or the size is negative.
  explicit DistributedSampler(SamplerOptions options);

  // The epoch used by indices(): shuffling is seeded with seed + epoch. Call before each epoch
  // (the Loader does it for you).
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }
  // The global position the epoch starts at: 0 (the default), or the positions already read when
  // an interrupted epoch resumes (the Loader sets it from a checkpoint's position). Applies to
  // indices(), shard_size(), real_positions(), padding() and span(). Throws UsageError outside
  // [0, dataset_size].
  void set_offset(int64_t offset);
  int64_t offset() const { return offset_; }

  // This rank's dataset indices for the current epoch, in the order they are to be read.
  std::vector<int64_t> indices() const;

  // Samples on this rank this epoch, with m = n - offset() remaining: ceil(m / world), or
  // floor(m / world) with drop_last, or ceil((m - rank) / world) with even_batches false.
  int64_t shard_size() const;
  // Global positions below this hold real samples: n, or offset() + shard_size() * world with
  // drop_last.
  int64_t real_positions() const;
  // Padded duplicates over all ranks this epoch (0 with drop_last or even_batches false, always < world).
  int64_t padding() const;
  // The span of this rank's shard positions starting at first_position.
  ShardSpan span(int64_t first_position) const {
    return ShardSpan{first_position, real_positions(), options_.world_size, offset_};
  }

  const SamplerOptions& options() const { return options_; }

 private:
  SamplerOptions options_;
  int64_t epoch_ = 0;
  int64_t offset_ = 0;
};

// The pure functions behind DistributedSampler: this rank's indices, and its shard size, for an
// epoch started at global position `offset` (0: the whole epoch). Throw UsageError for a rank
// outside the world, a negative size, or an offset outside [0, dataset_size].
std::vector<int64_t> shard_indices(const SamplerOptions& options, int64_t epoch, int64_t offset = 0);
int64_t shard_size(const SamplerOptions& options, int64_t offset = 0);

}  // namespace xlaunch
