#include "data/epoch_run.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "profile/step_clock.h"
#include "profile/sync_count.h"
#include "augment/rows.h"
#include "profile/trace.h"
#include "xlaunch/augment/sequential.h"

namespace xlaunch::detail {

namespace {

class IndexBatches final : public BatchMaker {
 public:
  IndexBatches(std::shared_ptr<const Source> source, EpochPlan plan) : source_(std::move(source)), plan_(std::move(plan)) {}
  // A row's sample id is its dataset index.
  bool make(int64_t k, const HostAllocator& alloc, Batch& out, std::vector<int64_t>& ids) override {
    const int64_t begin = k * plan_.batch_size;
    const int64_t end = std::min<int64_t>(begin + plan_.batch_size, plan_.shard.size());
    ids.assign(plan_.shard.begin() + begin, plan_.shard.begin() + end);
    out.span = plan_.span;
    out.span.first_position = begin;
    try {
      source_->collate(c10::ArrayRef<int64_t>(plan_.shard.data() + begin, end - begin), alloc, out);
    } catch (const SampleError& e) {
      throw SampleError(e.index(), std::string(e.what()) + " (batch " + std::to_string(k) + " of epoch " +
                                       std::to_string(plan_.epoch) + " on rank " + std::to_string(plan_.rank) + ")");
    }
    return true;
  }
  int64_t end() const override { return plan_.end_batch; }

 private:
  const std::shared_ptr<const Source> source_;
  const EpochPlan plan_;
};

}  // namespace

std::shared_ptr<BatchMaker> index_batches(std::shared_ptr<const Source> source, EpochPlan plan) {
  return std::make_shared<IndexBatches>(std::move(source), std::move(plan));
}

EpochRun::EpochRun(std::shared_ptr<BatchMaker> maker, std::shared_ptr<const DeviceStage> stage, int64_t first_key,
                   int64_t first_index, int64_t epoch, int workers, int prefetch_factor, Augmentation augment)
    : maker_(std::move(maker)),
      stage_(std::move(stage)),
      epoch_(epoch),
      window_(static_cast<int64_t>(workers) * prefetch_factor),
      augment_(std::move(augment)),
      next_index_(first_index),
      next_start_(first_key),
      next_take_(first_key) {
  alloc_ = [stage = stage_](at::IntArrayRef sizes, at::ScalarType dtype) {
    return stage->host_empty(sizes, dtype);
  };
  for (int w = 0; w < workers; ++w) threads_.emplace_back([this] { worker_loop(); });
}

EpochRun::EpochRun(std::shared_ptr<const Source> source, std::shared_ptr<const DeviceStage> stage, EpochPlan plan,
                   int workers, int prefetch_factor)
    : EpochRun(index_batches(std::move(source), plan), std::move(stage), plan.first_batch, plan.first_batch, plan.epoch,
               workers, prefetch_factor, plan.augment) {}

void EpochRun::augment(Batch& batch, const std::vector<int64_t>& ids) const {
  batch.data = (*augment_.sequence)(batch.data, augment::BatchKey{augment_.seed, epoch_, ids});
}

bool EpochRun::next(Batch& out, int64_t* key) {
  Slot slot;
  int64_t k = 0;
  do {  // keys that hold no batch (ended stream parts) are passed over
    if (past_end(next_take_)) return false;
    k = next_take_;
    if (threads_.empty()) {
      slot = produce(next_take_);
      ++next_take_;
    } else {
      std::unique_lock<std::mutex> lk(mu_);
      // A stream's end may become known while waiting: the worker that finds it posts its slot
      // after setting it, under mu_, so the predicate sees either the slot or the end.
      ready_cv_.wait(lk, [&] { return ready_.count(next_take_) > 0 || past_end(next_take_); });
      auto it = ready_.find(next_take_);
      if (it == ready_.end()) return false;
      slot = std::move(it->second);
      ready_.erase(it);
      ++next_take_;
      lk.unlock();
      work_cv_.notify_all();
    }
    if (slot.error) {
      next_take_ = BatchMaker::kNoEnd;
      stop();
      std::rethrow_exception(slot.error);
    }
  } while (!slot.has_batch);
  stage_->hand_over(slot.batch, slot.fence);
  // On the device, on the training thread's current stream, which now waits for the copy.
  if (augment_.sequence && !augment_.on_worker) augment(slot.batch, slot.ids);
  slot.batch.index = next_index_++;
  out = std::move(slot.batch);
  if (key) *key = k;
  return true;
}

void EpochRun::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

EpochRun::Slot EpochRun::produce(int64_t k) const {
  Slot slot;
  try {
    slot.has_batch = maker_->make(k, alloc_, slot.batch, slot.ids);
    if (slot.has_batch && augment_.sequence && augment_.on_worker) augment(slot.batch, slot.ids);
    if (slot.has_batch) slot.fence = stage_->start_copy(slot.batch);
  } catch (...) {
    slot.error = std::current_exception();
  }
  return slot;
}

void EpochRun::worker_loop() {
  const profile::syncs::CountedThread counted("the loader's worker thread");  // debug: its syncs are the step's too
  augment::detail::rows_on_this_thread_only = true;  // the workers are the parallelism (rows.h)
  for (;;) {
    int64_t k = 0;
    {
      std::unique_lock<std::mutex> lk(mu_);
      work_cv_.wait(lk, [&] {
        return stopping_ || past_end(next_start_) || next_start_ < next_take_ + window_;
      });
      if (stopping_ || past_end(next_start_)) return;
      k = next_start_++;
    }
    const bool traced = profile::trace::active();
    const uint64_t t0 = traced ? profile::monotonic_ns() : 0;
    Slot slot = produce(k);
    if (traced)
      profile::trace::span(profile::trace::loader_thread_id(), "batch", t0, profile::monotonic_ns() - t0,
                           {{"batch", static_cast<int64_t>(k)}, {"epoch", epoch_}});
    {
      std::lock_guard<std::mutex> lk(mu_);
      ready_.emplace(k, std::move(slot));
    }
    // Workers waiting for room see a stream's end at the training thread's next take, or stop().
    ready_cv_.notify_one();
  }
}

double drain_seconds(EpochRun& run) {
  const auto t0 = std::chrono::steady_clock::now();
  Batch b;
  while (run.next(b)) {
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Measures batches/s for 1, 2, 4... workers (up to the cores, at most 8) on the epoch's first
// batches, throwing the batches away, and keeps the smallest count within 10% of the best: more
// threads than that only take cores from the training step. Counts of 0 are not candidates:
// loading in the training thread never overlaps the step.
int choose_workers(const std::shared_ptr<const Source>& source, const std::shared_ptr<const DeviceStage>& stage,
                   const std::function<EpochPlan(int64_t, int64_t)>& plan_of, int64_t num_batches,
                   int prefetch_factor, int rank) {
  const int64_t total = num_batches;
  const int max_workers = std::clamp<int>(static_cast<int>(std::thread::hardware_concurrency()), 1, 8);
  if (total < 2) return 1;
  {  // warm up caches and allocators
    EpochRun warm(source, stage, plan_of(0, 1), 0, 1);
    drain_seconds(warm);
  }
  std::vector<std::pair<int, double>> rates;
  for (int c = 1; c <= max_workers; c *= 2) {
    const int64_t probe = std::min<int64_t>(total, 4 + 4 * c);
    EpochRun run(source, stage, plan_of(0, probe), c, prefetch_factor);
    rates.emplace_back(c, static_cast<double>(probe) / drain_seconds(run));
  }
  double best = 0;
  for (const auto& r : rates) best = std::max(best, r.second);
  int chosen = rates.back().first;
  for (const auto& r : rates)
    if (r.second >= 0.9 * best) {
      chosen = r.first;
      break;
    }
  std::string text;
  for (const auto& r : rates) text += " " + std::to_string(r.first) + ":" + std::to_string(static_cast<long>(r.second));
  std::fprintf(stderr, "[xlaunch rank %d] loader: num_workers=auto measured batches/s per worker count%s -> %d\n",
               rank, text.c_str(), chosen);
  return chosen;
}

}  // namespace xlaunch::detail
