// The per-rank data loader: this rank's shard of a dataset (sampler.h), collated into batches by
// worker threads ahead of the training loop, and handed over on the training device.
//
//   auto opt = xlaunch::LoaderOptions::from_env();  // workers, prefetch, pinning as launched
//   opt.batch_size = 64;
//   opt.rank = rank; opt.world_size = world;    // Accelerator::prepare fills these in
//   xlaunch::Loader loader(FashionMnist(FashionMnist::Split::Train), opt);
//   for (int epoch = 0; epoch < 3; ++epoch) {
//     loader.set_epoch(epoch);                  // optional: begin() advances it by itself
//     for (auto& batch : loader) step(batch.data, batch.target);
//   }
//
// Guarantees:
//  - Order: batch k of an epoch holds the shard positions [k*batch_size, (k+1)*batch_size), and
//    batches arrive in k order; with a deterministic dataset the batches are identical for any
//    num_workers (workers take batches in turn, the training thread receives them in order).
//  - Prefetch: at most prefetch_factor * num_workers batches are loaded ahead of the one the
//    training loop holds.
//  - Device (options.device is CUDA and pin_memory on): workers collate into pinned host memory
//    from LibTorch's caching host allocator (a reusable pool: a block is reused only after the
//    copy that read it has finished) and start the copy to the device non_blocking on a side
//    stream; the training thread's current stream waits on the copy's event when the batch is
//    handed over, and the batch's device memory is recorded on that stream. So the copy of batch
//    i+1 overlaps the compute of batch i, and no host synchronisation happens. pin_memory off:
//    pageable collation, the same asynchronous hand-over. CPU device: no pinning, no copy.
//  - Errors: an exception while loading sample i is rethrown in the training thread, when batch
//    order reaches it, as SampleError (index() == i) naming the batch and the epoch.
//  - Shutdown: leaving a range-for early (break, exception) or destroying the loader stops and
//    joins the workers; it never waits for more than the batches already being collated.
//
// Streaming datasets (no size: stream_dataset.h) go through the same workers, prefetch window,
// pinning, device copy and data-wait measurement. What differs:
//  - Order: the batches are dealt from the rank's parts in turn (stream_dataset.h), the same for any
//    num_workers with a fixed parts_per_rank. A worker reads one part at a time; parts_per_rank >=
//    num_workers lets every worker read.
//  - The pass (epoch) ends on a rank when all its parts have ended, so ranks may run out at
//    different batches. Prepared by an Accelerator on several ranks, the ranks agree at every batch
//    that each has one (one allgather of a byte per rank): when all have run out the epoch ends
//    everywhere; when only some have, every rank throws the same UsageError naming them (instead
//    of the others waiting for them in the gradient allreduce), or, with drop_last, the epoch ends
//    on every rank and the records left on the others are not read in it. Balance the parts.
//  - num_workers kAutoWorkers: one worker per part (up to 8): nothing can be measured without
//    reading the stream. skip_first_batches is refused (a stream resumes from set_position).
//  - num_batches() and dataset_size() are -1; Batch::span holds no padding (gather_for_metrics
//    keeps every row).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "xlaunch/dataset.h"
#include "xlaunch/env_vars.h"
#include "xlaunch/sampler.h"
#include "xlaunch/stream_dataset.h"

namespace xlaunch {

class Communicator;
namespace augment {
class Sequential;
}

// num_workers value meaning: measure a few worker counts on the first batches, keep the best.
inline constexpr int kAutoWorkers = -1;

struct LoaderOptions {
  int64_t batch_size = 1;  // per rank
  bool shuffle = true;
  uint64_t seed = 0;  // the same on every rank
  // false (even batches): every rank gets the same number of batches, the shard padded by
  // wrapping around; the last batch may be short (the same on every rank). true: the tail that
  // does not fill a whole batch on every rank is not read.
  bool drop_last = false;
  // false (Accelerate's even_batches=False; loader.even_batches, XLAUNCH_EVEN_BATCHES): no padding,
  // every sample read exactly once (sampler.h), so ranks may run different numbers of batches. A
  // prepared loader then joins its ranks at the end of each epoch: a rank whose data ended keeps
  // taking part in the others' gradient averaging with nothing of its own, until every rank's data
  // has ended (Accelerator::join, docs/data-loading.md). No effect with drop_last.
  bool even_batches = env::default_bool(env::kEvenBatches);
  // true: the dataset is already this rank's own shard (one file per rank, say): the loader reads
  // all of it on this rank, not sharding it again, so each rank may have a different size. Needs
  // even_batches false when the ranks' batch counts differ (Accelerator::prepare checks it).
  // gather_for_metrics knows nothing of such shards: gather results with Accelerator::gather.
  bool already_sharded = false;
  // The settings the launcher controls (loader.* in the config). These defaults are the
  // XLAUNCH_* variables' own; from_env() takes the launched job's values instead.
  // num_workers 0: load in the training thread; kAutoWorkers: measure, keep the best.
  int num_workers = static_cast<int>(env::default_int(env::kNumWorkers));
  int prefetch_factor = static_cast<int>(env::default_int(env::kPrefetchFactor));  // batches in flight per worker
  bool pin_memory = env::default_bool(env::kPinMemory);  // acts only when device is CUDA
  c10::Device device = c10::Device(c10::kCPU);  // where batches are handed over
  int rank = 0;  // this process's place: the caller's (the Accelerator passes its own)
  int world_size = 1;
  // Batched random augmentation of batch.data (augment.h), applied once the batch is on `device`:
  // on the CPU by the worker that collated it (so it runs in parallel over the workers, and in the
  // training thread with num_workers 0); on a CUDA device on the training thread at hand-over,
  // after the copy, as asynchronous kernels on its current stream (the parameters go to the
  // device from pinned memory, non_blocking), inside the data-wait measurement. Each batch is keyed
  // by BatchKey{seed, epoch, its rows' ids}: a row's id is its dataset index (a streaming
  // dataset's: the global part index x 2^40 + the record's number in the part's pass), so the
  // augmented batches are the same for any num_workers, and a sample's draws do not depend on its
  // batch position (same_on_batch aside: augment/transform.h). null: no augmentation.
  std::shared_ptr<const augment::Sequential> augment;
  // Streaming datasets only: each rank reads this many parts (of world_size x parts_per_rank).
  // The batches depend on it, not on num_workers; a resume needs the same total number of parts.
  int64_t parts_per_rank = 4;

  // The defaults, with num_workers, prefetch_factor, pin_memory and even_batches from
  // XLAUNCH_NUM_WORKERS (a count or "auto"), XLAUNCH_PREFETCH_FACTOR, XLAUNCH_PIN_MEMORY and
  // XLAUNCH_EVEN_BATCHES (env_vars.h), as `xlaunch run` sets them from the config. Throws UsageError naming the variable on a malformed value.
  static LoaderOptions from_env();
};

// Where iteration stands, for checkpoints: the epoch, and how far into it.
//
// `consumed` is what carries over to any world size and batch size: after k batches of b on W
// ranks, the ranks together have read the positions [0, k*b*W) of the epoch's global order
// (sampler.h), so the rest of the epoch is the positions consumed.. whoever reads them.
// `batch` counts this loader's batches: the index of the next batch (Batch::index) in the epoch as
// this loader deals it; for an epoch resumed at an offset that is not a whole number of this
// loader's global batches (batch_size x world_size) back, they count from that offset.
struct LoaderPosition {
  int64_t epoch = 0;
  int64_t batch = 0;     // batches of the epoch handed over on this rank (see above)
  int64_t consumed = 0;  // global positions of the epoch read by all ranks together (<= dataset size)
  // Streaming loaders only (empty otherwise): the records of each of this rank's parts handed over
  // in the epoch (entry j: part j * world_size + rank, stream_dataset.h), and the j of the part
  // the next batch comes from. `consumed` is then their sum, this rank's alone.
  std::vector<int64_t> part_records;
  int64_t next_part = 0;
};

namespace detail {
class EpochRun;
struct Tracking;
}

class Loader {
 public:
  // Any LibTorch dataset (see dataset.h), taken by value and shared by the worker threads.
  template <typename Dataset,
            typename = std::enable_if_t<!std::is_convertible_v<Dataset, std::shared_ptr<const RowDataset>> &&
                                        !std::is_convertible_v<Dataset, std::shared_ptr<const StreamDataset>>>>
  Loader(Dataset dataset, LoaderOptions options)
      : Loader(detail::torch_source(std::make_shared<Dataset>(std::move(dataset))), options) {}
  Loader(std::shared_ptr<const RowDataset> dataset, LoaderOptions options);
  // A dataset with no size, read as parts (stream_dataset.h). Throws UsageError for a null
  // dataset or parts_per_rank < 1.
  Loader(std::shared_ptr<const StreamDataset> dataset, LoaderOptions options);
  ~Loader();
  Loader(Loader&&) noexcept;
  Loader& operator=(Loader&&) noexcept;

  // One epoch, in batch order. Move-only; destroying it stops the epoch's workers.
  class Iterator {
   public:
    Iterator();  // the end
    Iterator(Iterator&&) noexcept;
    Iterator& operator=(Iterator&&) noexcept;
    ~Iterator();
    Batch& operator*() { return *current_; }
    Batch* operator->() { return &*current_; }
    Iterator& operator++();  // blocks until the next batch is ready; rethrows a load error
    bool operator!=(const Iterator& other) const { return current_.has_value() != other.current_.has_value(); }
    bool operator==(const Iterator& other) const { return !(*this != other); }

   private:
    friend class Loader;
    Iterator(std::unique_ptr<detail::EpochRun> run, std::shared_ptr<detail::Tracking> tracking);
    std::unique_ptr<detail::EpochRun> run_;
    std::shared_ptr<detail::Tracking> tracking_;
    std::optional<Batch> current_;
  };

  // Starts an epoch: the sampler is seeded with epoch(), which then advances by one. The first
  // epoch with kAutoWorkers first measures the worker counts (see num_workers()).
  Iterator begin();
  Iterator end() { return Iterator(); }

  // The epoch the next begin() reads (0 at first).
  void set_epoch(int64_t epoch);
  int64_t epoch() const;
  // The next begin() starts at batch n of its epoch (after the offset set_position gave it, if
  // any); later epochs start at 0. n past the epoch's last batch gives an empty epoch.
  void skip_first_batches(int64_t n);

  // Where the next batch comes from (what Accelerator::save_state records): during an epoch, that
  // epoch, the count of its batches handed over so far (skipped ones included) and the global
  // positions read; once its last batch has been handed over, or before the first begin(),
  // epoch() and the pending start (set_position, skip_first_batches).
  LoaderPosition position() const;
  // Resumes there (Accelerator::load_state), whatever epoch was in progress: the next begin()
  // reads epoch pos.epoch from global position pos.consumed (a position() of a loader on any
  // world size and batch size), dealing the rest of the epoch over this loader's ranks: each
  // remaining sample exactly once, padded (or cut, with drop_last) as a whole epoch would be.
  // When pos.consumed is a multiple of this loader's global batch, the epoch is exactly this
  // loader's epoch with that many batches skipped (a resume on the same world size is bitwise
  // the uninterrupted run). A position with consumed 0 and batch > 0 (written by hand) skips
  // pos.batch batches. Throws UsageError for a negative epoch or batch, or consumed outside
  // [0, dataset_size()].
  // A streaming loader resumes from pos.part_records and pos.next_part (a position() of a loader
  // with the same world_size and parts_per_rank: exactly the uninterrupted run), numbering its
  // batches from pos.batch; empty part_records: the start of epoch pos.epoch. Throws UsageError
  // when part_records does not have parts_per_rank entries >= 0, or next_part is not one of them.
  void set_position(const LoaderPosition& pos);

  // fn(epoch) runs on the training thread when an iterator of this loader reaches the end of
  // epoch `epoch`: in the operator++ after its last batch (the one that ends a range-for), once
  // the workers are joined and position() already names epoch + 1 from its start; for an epoch
  // with no batch left (skipped to its end), in begin(). Not called when the loop is left early
  // (break, exception) nor for a failed epoch. An exception from fn leaves that operator++.
  // One callback per loader (a new one replaces it; an empty function removes it); with_place
  // does not copy it.
  void set_epoch_end_callback(std::function<void(int64_t epoch)> fn);
  // fn() runs on the training thread when the loop comes back to an iterator of this loader for
  // the batch after one it handed over (at the top of its operator++, before waiting): the body
  // for that batch is done, and position() counts it. Not before an epoch's first batch. What the
  // Accelerator marks a step boundary with (docs/checkpointing.md). Same rules as above otherwise.
  void set_next_batch_callback(std::function<void()> fn);
  // Streaming loaders on several ranks: the communicator (over the CPU) on which the ranks agree
  // at each batch that every rank has one (see the top of this file). Accelerator::prepare sets
  // it; nullptr (the default) agrees on nothing, each rank ending its pass on its own.
  void set_stream_agreement(std::shared_ptr<Communicator> comm);
  bool is_stream() const;

  // The same dataset (shared, not copied) and options, for another place in the job: what
  // Accelerator::prepare(loader) returns for its rank, world size and device. The new loader
  // starts at epoch 0 with nothing skipped.
  Loader with_place(int rank, int world_size, c10::Device device) const;

  // The span of the batch most recently handed over by this loader's iterators (before the first:
  // an empty span at position 0). What Accelerator::gather_for_metrics(t) passes on for the
  // batch the caller is evaluating.
  const ShardSpan& last_span() const;

  // Per whole epoch on this rank: the same on every rank unless even_batches is false or the
  // dataset is already_sharded (an epoch resumed at an offset has fewer). Both -1 for a streaming
  // loader.
  int64_t num_batches() const;
  // Batches of the epoch in progress still to come after the one handed over last: 0 from the
  // hand-over of its last batch until the next begin(); -1 when no epoch has begun (at first, and
  // after set_position). What the Accelerator's sync_with_dataloader reads.
  int64_t batches_left() const;
  int64_t dataset_size() const;
  // The worker count in use: options().num_workers, or after the first auto epoch, its choice.
  int num_workers() const;
  const LoaderOptions& options() const;
  // The sampler, set to the epoch and offset of the last begin() (at first: epoch 0, offset 0).
  const DistributedSampler& sampler() const;

 private:
  Loader(detail::Source source, LoaderOptions options);
  Loader(std::shared_ptr<const detail::Source> source, std::shared_ptr<const StreamDataset> stream,
         LoaderOptions options);
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace xlaunch
