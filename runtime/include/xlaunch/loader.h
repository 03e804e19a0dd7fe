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
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <optional>

#include "xlaunch/dataset.h"
#include "xlaunch/env_vars.h"
#include "xlaunch/sampler.h"

namespace xlaunch {

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
  // The three settings the launcher controls (loader.* in the config). These defaults are the
  // XLAUNCH_* variables' own; from_env() takes the launched job's values instead.
  // num_workers 0: load in the training thread; kAutoWorkers: measure, keep the best.
  int num_workers = static_cast<int>(env::default_int(env::kNumWorkers));
  int prefetch_factor = static_cast<int>(env::default_int(env::kPrefetchFactor));  // batches in flight per worker
  bool pin_memory = env::default_bool(env::kPinMemory);  // acts only when device is CUDA
  c10::Device device = c10::Device(c10::kCPU);  // where batches are handed over
  int rank = 0;  // this process's place: the caller's (the Accelerator passes its own)
  int world_size = 1;

  // The defaults, with num_workers, prefetch_factor and pin_memory from XLAUNCH_NUM_WORKERS
  // (a count or "auto"), XLAUNCH_PREFETCH_FACTOR and XLAUNCH_PIN_MEMORY (env_vars.h), as `xlaunch
  // run` sets them from the config. Throws UsageError naming the variable on a malformed value.
  static LoaderOptions from_env();
};

// Where iteration stands, for checkpoints: the epoch, and the first of its batches still to be
// handed over.
struct LoaderPosition {
  int64_t epoch = 0;
  int64_t batch = 0;
};

namespace detail {
class EpochRun;
struct Progress;
}

class Loader {
 public:
  // Any LibTorch dataset (see dataset.h), taken by value and shared by the worker threads.
  template <typename Dataset, typename = std::enable_if_t<!std::is_convertible_v<
                                  Dataset, std::shared_ptr<const RowDataset>>>>
  Loader(Dataset dataset, LoaderOptions options)
      : Loader(detail::torch_source(std::make_shared<Dataset>(std::move(dataset))), options) {}
  Loader(std::shared_ptr<const RowDataset> dataset, LoaderOptions options);
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
    Iterator(std::unique_ptr<detail::EpochRun> run, std::shared_ptr<ShardSpan> last_span,
             std::shared_ptr<detail::Progress> progress);
    std::unique_ptr<detail::EpochRun> run_;
    std::shared_ptr<ShardSpan> last_span_;
    std::shared_ptr<detail::Progress> progress_;
    std::optional<Batch> current_;
  };

  // Starts an epoch: the sampler is seeded with epoch(), which then advances by one. The first
  // epoch with kAutoWorkers first measures the worker counts (see num_workers()).
  Iterator begin();
  Iterator end() { return Iterator(); }

  // The epoch the next begin() reads (0 at first).
  void set_epoch(int64_t epoch);
  int64_t epoch() const;
  // The next begin() starts at batch n (resuming mid-epoch from a checkpoint); later epochs
  // start at 0. n >= num_batches() gives an empty epoch.
  void skip_first_batches(int64_t n);

  // Where the next batch comes from (what Accelerator::save_state records): during an epoch, that
  // epoch and the count of its batches handed over so far (skipped ones included); once its last
  // batch has been handed over, or before the first begin(), epoch() and the pending skip.
  LoaderPosition position() const;
  // Resumes there (Accelerator::load_state): the next begin() reads pos.epoch from batch
  // pos.batch, whatever epoch was in progress.
  void set_position(const LoaderPosition& pos);

  // The same dataset (shared, not copied) and options, for another place in the job: what
  // Accelerator::prepare(loader) returns for its rank, world size and device. The new loader
  // starts at epoch 0 with nothing skipped.
  Loader with_place(int rank, int world_size, c10::Device device) const;

  // The span of the batch most recently handed over by this loader's iterators (before the first:
  // an empty span at position 0). What Accelerator::gather_for_metrics(t) passes on for the
  // batch the caller is evaluating.
  const ShardSpan& last_span() const;

  int64_t num_batches() const;  // per epoch on this rank, the same on every rank
  int64_t dataset_size() const;
  // The worker count in use: options().num_workers, or after the first auto epoch, its choice.
  int num_workers() const;
  const LoaderOptions& options() const;
  const DistributedSampler& sampler() const;

 private:
  Loader(detail::Source source, LoaderOptions options);
  Loader(std::shared_ptr<const detail::Source> source, LoaderOptions options);
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace xlaunch
