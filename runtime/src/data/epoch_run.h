// One epoch of the loader: which batches to load (EpochPlan), and the worker pool that loads them
// ahead of the training thread (EpochRun). Private to the loader.
#pragma once

#include <ATen/core/Tensor.h>

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "data/loader_stage.h"
#include "xlaunch/dataset.h"
#include "xlaunch/sampler.h"

namespace xlaunch::detail {

struct EpochPlan {
  std::vector<int64_t> shard;  // this rank's dataset indices for the epoch, in order
  int64_t batch_size = 1;
  int64_t first_batch = 0;  // batches [first_batch, end_batch) are loaded
  int64_t end_batch = 0;
  int64_t epoch = 0;
  int rank = 0;
  ShardSpan span;  // real_positions, world_size and offset; first_position set per batch
};

// Threads: `workers` threads take batch numbers in increasing order from next_start_ and post
// the result in ready_; the training thread takes them out in order (next_take_). A worker may
// start batch k only while k < next_take_ + window_, which bounds the batches in flight. With no
// workers, the training thread loads each batch itself inside next().
class EpochRun {
 public:
  EpochRun(std::shared_ptr<const Source> source, std::shared_ptr<const DeviceStage> stage, EpochPlan plan,
           int workers, int prefetch_factor);
  ~EpochRun() { stop(); }

  // The next batch in order; false at the end of the epoch. Rethrows a loading error (after
  // which the epoch is over).
  bool next(Batch& out);
  // Workers finish the batch they are collating, start no other, and are joined.
  void stop();
  int64_t epoch() const { return plan_.epoch; }

 private:
  struct Slot {
    Batch batch;
    std::shared_ptr<void> fence;
    std::exception_ptr error;
  };
  Slot produce(int64_t k) const;
  void worker_loop();

  const std::shared_ptr<const Source> source_;
  const std::shared_ptr<const DeviceStage> stage_;
  const EpochPlan plan_;
  const int64_t window_;
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
  int64_t batches = 0;  // the epoch's end batch on this rank (fewer when it began at an offset)
  int64_t offset = 0;  // the global position the epoch began at
  int64_t real_positions = 0;  // the sampler's, for the epoch
};

// What a loader shares with its iterators (which may outlive a move of the loader).
struct Tracking {
  ShardSpan last_span;  // of the batch handed over last
  Progress progress;
  std::function<void(int64_t)> on_epoch_end;
  std::function<void()> on_next_batch;
};

// Loads every remaining batch of `run`, throwing them away; returns the seconds it took.
double drain_seconds(EpochRun& run);

// num_workers "auto": the worker count for this source and stage, measured on the epoch's first
// batches (plan_of(first, end) plans batches [first, end) of it). rank: for the report line.
int choose_workers(const std::shared_ptr<const Source>& source, const std::shared_ptr<const DeviceStage>& stage,
                   const std::function<EpochPlan(int64_t, int64_t)>& plan_of, int64_t num_batches,
                   int prefetch_factor, int rank);

}  // namespace xlaunch::detail
