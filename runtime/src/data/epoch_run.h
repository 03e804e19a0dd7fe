// One epoch of the loader: which batches to load (EpochPlan, or a stream's parts: BatchMaker), and
// the worker pool that loads them ahead of the training thread (EpochRun). Private to the loader.
#pragma once

#include <ATen/core/Tensor.h>

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "data/loader_stage.h"
#include "xlaunch/dataset.h"
#include "xlaunch/extend/communicator.h"
#include "xlaunch/sampler.h"

namespace xlaunch::augment {
class Sequential;
}

namespace xlaunch::detail {

// The loader's augmentation (LoaderOptions::augment) and where it runs: on the worker that
// collated the batch (a CPU device: the workers share the work), or on the training thread at
// hand-over, after the copy, on its current stream (a CUDA device). Each batch is keyed by
// BatchKey{seed, epoch, the rows' sample ids}.
struct Augmentation {
  std::shared_ptr<const augment::Sequential> sequence;  // null: none
  uint64_t seed = 0;
  bool on_worker = true;
};

struct EpochPlan {
  std::vector<int64_t> shard;  // this rank's dataset indices for the epoch, in order
  int64_t batch_size = 1;
  int64_t first_batch = 0;  // batches [first_batch, end_batch) are loaded
  int64_t end_batch = 0;
  int64_t epoch = 0;
  int rank = 0;
  ShardSpan span;  // real_positions, world_size and offset; first_position set per batch
  Augmentation augment;
};

// How an epoch's batches are made, by key: batch k of a shard (EpochPlan), or the next records of
// one of a stream's parts (stream_batches.h).
class BatchMaker {
 public:
  static constexpr int64_t kNoEnd = std::numeric_limits<int64_t>::max();
  virtual ~BatchMaker() = default;
  // Collates key k into `out` (data, target, span) and its rows' sample ids into `ids` (what the
  // augmentation is keyed by); false when k holds no batch (a stream part that has ended), which
  // the training thread passes over. Called from the workers, concurrently for distinct keys; a
  // SampleError it throws names the sample and where it belongs.
  virtual bool make(int64_t k, const HostAllocator& alloc, Batch& out, std::vector<int64_t>& ids) = 0;
  // One past the last key. A stream's is kNoEnd until every part has ended; it is set (once)
  // inside the make() that finds the last part's end, before that make() returns.
  virtual int64_t end() const = 0;
};

// Batches [first_batch, end_batch) of `plan`, by the shard's positions; key k is batch k.
std::shared_ptr<BatchMaker> index_batches(std::shared_ptr<const Source> source, EpochPlan plan);

// Threads: `workers` threads take keys in increasing order from next_start_ and post the result
// in ready_; the training thread takes them out in order (next_take_), passing over keys that hold
// no batch. A worker may start key k only while k < next_take_ + window_, which bounds the batches
// in flight. With no workers, the training thread loads each batch itself inside next().
class EpochRun {
 public:
  // Keys from first_key on; the batches handed over are numbered (Batch::index) from first_index.
  EpochRun(std::shared_ptr<BatchMaker> maker, std::shared_ptr<const DeviceStage> stage, int64_t first_key,
           int64_t first_index, int64_t epoch, int workers, int prefetch_factor, Augmentation augment = {});
  // The batches of `plan` (key = index = batch number), augmented as plan.augment says.
  EpochRun(std::shared_ptr<const Source> source, std::shared_ptr<const DeviceStage> stage, EpochPlan plan,
           int workers, int prefetch_factor);
  ~EpochRun() { stop(); }

  // The next batch in order; false at the end of the epoch. Rethrows a loading error (after
  // which the epoch is over). `key`, when given, receives the batch's key.
  bool next(Batch& out, int64_t* key = nullptr);
  // Workers finish the batch they are collating, start no other, and are joined.
  void stop();
  int64_t epoch() const { return epoch_; }

 private:
  struct Slot {
    bool has_batch = false;
    Batch batch;
    std::shared_ptr<void> fence;
    std::exception_ptr error;
    std::vector<int64_t> ids;  // the rows' sample ids, for an augmentation at hand-over
  };
  void augment(Batch& batch, const std::vector<int64_t>& ids) const;
  Slot produce(int64_t k) const;
  void worker_loop();
  bool past_end(int64_t k) const { return k >= maker_->end(); }

  const std::shared_ptr<BatchMaker> maker_;
  const std::shared_ptr<const DeviceStage> stage_;
  const int64_t epoch_;
  const int64_t window_;
  const Augmentation augment_;
  int64_t next_index_;
  HostAllocator alloc_;
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable ready_cv_;
  std::map<int64_t, Slot> ready_;
  int64_t next_start_;
  int64_t next_take_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

// The epoch in progress and its batches handed over.
struct Progress {
  int64_t epoch = -1;  // -1: no epoch begun since the last set_position
  int64_t handed = 0;  // batch index of the next batch
  int64_t batches = 0;  // the epoch's end batch on this rank (fewer when it began at an offset);
                        // a stream's: kNoEnd until its last batch, then `handed`
  int64_t offset = 0;  // the global position the epoch began at
  int64_t real_positions = 0;  // the sampler's, for the epoch
  std::vector<int64_t> part_records;  // a stream's: records handed over per part of this rank
  int64_t next_part = 0;              // a stream's: the part the next batch comes from
};

// What a loader shares with its iterators (which may outlive a move of the loader).
struct Tracking {
  ShardSpan last_span;  // of the batch handed over last
  Progress progress;
  std::function<void(int64_t)> on_epoch_end;
  std::function<void()> on_next_batch;
  std::shared_ptr<Communicator> stream_agreement;  // Loader::set_stream_agreement
  bool drop_last = false;
};

// Loads every remaining batch of `run`, throwing them away; returns the seconds it took.
double drain_seconds(EpochRun& run);

// num_workers "auto": the worker count for this source and stage, measured on the epoch's first
// batches (plan_of(first, end) plans batches [first, end) of it). rank: for the report line.
int choose_workers(const std::shared_ptr<const Source>& source, const std::shared_ptr<const DeviceStage>& stage,
                   const std::function<EpochPlan(int64_t, int64_t)>& plan_of, int64_t num_batches,
                   int prefetch_factor, int rank);

}  // namespace xlaunch::detail
