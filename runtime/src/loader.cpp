#include "xlaunch/loader.h"

#include <ATen/ops/empty.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "loader_stage.h"
#include "xlaunch/env_vars.h"

namespace xlaunch {

// ---- settings from the environment ---------------------------------------------------------

int num_workers_from_env() {
  const std::string s = env::get_string(env::kNumWorkers);
  if (s == "auto") return kAutoWorkers;
  char* end = nullptr;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || v < 0 || v > 1024)
    throw env::bad_value(env::kNumWorkers, s, "a worker count (0..1024) or 'auto'");
  return static_cast<int>(v);
}

int prefetch_factor_from_env() {
  const long v = env::get_int(env::kPrefetchFactor);
  if (v < 1 || v > 1024) throw env::bad_value(env::kPrefetchFactor, std::to_string(v), "in 1..1024");
  return static_cast<int>(v);
}

bool pin_memory_from_env() { return env::get_bool(env::kPinMemory); }

// ---- the CPU stage ---------------------------------------------------------------------------

namespace detail {
namespace {

class CpuStage final : public DeviceStage {
 public:
  at::Tensor host_empty(at::IntArrayRef sizes, at::ScalarType dtype) const override {
    return at::empty(sizes, at::TensorOptions().dtype(dtype));
  }
  std::shared_ptr<void> start_copy(Batch&) const override { return nullptr; }
  void hand_over(Batch&, const std::shared_ptr<void>&) const override {}
  std::string describe() const override { return "cpu"; }
};

}  // namespace

std::shared_ptr<const DeviceStage> make_device_stage(c10::Device device, bool pin_memory) {
  if (device.is_cpu()) return std::make_shared<CpuStage>();
  if (device.is_cuda()) {
#if XLAUNCH_HAVE_CUDA
    return make_cuda_stage(device, pin_memory);
#else
    (void)pin_memory;
    throw UsageError("Loader: device " + device.str() + " asked for, but this libxlaunch was built "
                     "without CUDA device paths; reconfigure with a CUDA LibTorch and "
                     "-DXLAUNCH_WITH_CUDA=ON, or load onto the CPU");
#endif
  }
  throw UsageError("Loader: device " + device.str() + " is not supported; use the CPU or a CUDA device");
}

// ---- one epoch -----------------------------------------------------------------------------

struct EpochPlan {
  std::vector<int64_t> shard;  // this rank's dataset indices for the epoch, in order
  int64_t batch_size = 1;
  int64_t first_batch = 0;  // batches [first_batch, end_batch) are loaded
  int64_t end_batch = 0;
  int64_t epoch = 0;
  int rank = 0;
  ShardSpan span;  // real_positions and world_size; first_position set per batch
};

// Threads: `workers` threads take batch numbers in increasing order from next_start_ and post
// the result in ready_; the training thread takes them out in order (next_take_). A worker may
// start batch k only while k < next_take_ + window_, which bounds the batches in flight. With no
// workers, the training thread loads each batch itself inside next().
class EpochRun {
 public:
  EpochRun(std::shared_ptr<const Source> source, std::shared_ptr<const DeviceStage> stage,
           EpochPlan plan, int workers, int prefetch_factor)
      : source_(std::move(source)),
        stage_(std::move(stage)),
        plan_(std::move(plan)),
        window_(static_cast<int64_t>(workers) * prefetch_factor),
        next_start_(plan_.first_batch),
        next_take_(plan_.first_batch) {
    alloc_ = [stage = stage_](at::IntArrayRef sizes, at::ScalarType dtype) {
      return stage->host_empty(sizes, dtype);
    };
    for (int w = 0; w < workers; ++w) threads_.emplace_back([this] { worker_loop(); });
  }

  ~EpochRun() { stop(); }

  // The next batch in order; false at the end of the epoch. Rethrows a loading error (after
  // which the epoch is over).
  bool next(Batch& out) {
    if (next_take_ >= plan_.end_batch) return false;
    Slot slot;
    if (threads_.empty()) {
      slot = produce(next_take_);
      ++next_take_;
    } else {
      std::unique_lock<std::mutex> lk(mu_);
      ready_cv_.wait(lk, [&] { return ready_.count(next_take_) > 0; });
      auto it = ready_.find(next_take_);
      slot = std::move(it->second);
      ready_.erase(it);
      ++next_take_;
      lk.unlock();
      work_cv_.notify_all();
    }
    if (slot.error) {
      next_take_ = plan_.end_batch;
      stop();
      std::rethrow_exception(slot.error);
    }
    stage_->hand_over(slot.batch, slot.fence);
    out = std::move(slot.batch);
    return true;
  }

  // Workers finish the batch they are collating, start no other, and are joined.
  void stop() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stopping_ = true;
    }
    work_cv_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

 private:
  struct Slot {
    Batch batch;
    std::shared_ptr<void> fence;
    std::exception_ptr error;
  };

  Slot produce(int64_t k) const {
    Slot slot;
    try {
      const int64_t begin = k * plan_.batch_size;
      const int64_t end = std::min<int64_t>(begin + plan_.batch_size, plan_.shard.size());
      slot.batch.index = k;
      slot.batch.span = plan_.span;
      slot.batch.span.first_position = begin;
      source_->collate(c10::ArrayRef<int64_t>(plan_.shard.data() + begin, end - begin), alloc_,
                       slot.batch);
      slot.fence = stage_->start_copy(slot.batch);
    } catch (const SampleError& e) {
      slot.error = std::make_exception_ptr(
          SampleError(e.index(), std::string(e.what()) + " (batch " + std::to_string(k) + " of epoch " +
                                     std::to_string(plan_.epoch) + " on rank " + std::to_string(plan_.rank) + ")"));
    } catch (...) {
      slot.error = std::current_exception();
    }
    return slot;
  }

  void worker_loop() {
    for (;;) {
      int64_t k = 0;
      {
        std::unique_lock<std::mutex> lk(mu_);
        work_cv_.wait(lk, [&] {
          return stopping_ || next_start_ >= plan_.end_batch || next_start_ < next_take_ + window_;
        });
        if (stopping_ || next_start_ >= plan_.end_batch) return;
        k = next_start_++;
      }
      Slot slot = produce(k);
      {
        std::lock_guard<std::mutex> lk(mu_);
        ready_.emplace(k, std::move(slot));
      }
      ready_cv_.notify_one();
    }
  }

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

// The epoch in progress and its batches handed over, shared with that epoch's iterator.
struct Progress {
  int64_t epoch = -1;  // -1: no epoch begun since the last set_position
  int64_t handed = 0;
};

}  // namespace detail

// ---- the loader ----------------------------------------------------------------------------

struct Loader::State {
  std::shared_ptr<const detail::Source> source;
  std::shared_ptr<const detail::DeviceStage> stage;
  LoaderOptions options;
  DistributedSampler sampler;
  int workers = 0;
  int64_t next_epoch = 0;
  int64_t skip = 0;
  std::shared_ptr<ShardSpan> last_span = std::make_shared<ShardSpan>();
  std::shared_ptr<detail::Progress> progress = std::make_shared<detail::Progress>();

  detail::EpochPlan plan(int64_t first, int64_t end) const {
    detail::EpochPlan p;
    p.shard = sampler.indices();
    p.batch_size = options.batch_size;
    p.first_batch = first;
    p.end_batch = end;
    p.epoch = sampler.epoch();
    p.rank = options.rank;
    p.span = sampler.span(0);
    return p;
  }
  int64_t num_batches() const {
    const int64_t shard = sampler.shard_size(), b = options.batch_size;
    return options.drop_last ? shard / b : (shard + b - 1) / b;
  }
  int choose_workers();
};

namespace {

SamplerOptions sampler_options(int64_t size, const LoaderOptions& o) {
  if (o.batch_size < 1)
    throw UsageError("Loader: batch_size is " + std::to_string(o.batch_size) + "; it must be >= 1");
  if (o.prefetch_factor < 1)
    throw UsageError("Loader: prefetch_factor is " + std::to_string(o.prefetch_factor) +
                     "; it must be >= 1 (batches in flight per worker)");
  if (o.num_workers < 0 && o.num_workers != kAutoWorkers)
    throw UsageError("Loader: num_workers is " + std::to_string(o.num_workers) +
                     "; use a count >= 0 or xlaunch::kAutoWorkers");
  SamplerOptions s;
  s.dataset_size = size;
  s.rank = o.rank;
  s.world_size = o.world_size;
  s.seed = o.seed;
  s.shuffle = o.shuffle;
  s.drop_last = o.drop_last;
  return s;
}

double drain_seconds(detail::EpochRun& run) {
  const auto t0 = std::chrono::steady_clock::now();
  Batch b;
  while (run.next(b)) {
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

// Measures batches/s for 1, 2, 4... workers (up to the cores, at most 8) on the epoch's first
// batches, throwing the batches away, and keeps the smallest count within 10% of the best: more
// threads than that only take cores from the training step. Counts of 0 are not candidates:
// loading in the training thread never overlaps the step.
int Loader::State::choose_workers() {
  const int64_t total = num_batches();
  const int max_workers = std::clamp<int>(static_cast<int>(std::thread::hardware_concurrency()), 1, 8);
  if (total < 2) return 1;
  {  // warm up caches and allocators
    detail::EpochRun warm(source, stage, plan(0, 1), 0, 1);
    drain_seconds(warm);
  }
  std::vector<std::pair<int, double>> rates;
  for (int c = 1; c <= max_workers; c *= 2) {
    const int64_t probe = std::min<int64_t>(total, 4 + 4 * c);
    detail::EpochRun run(source, stage, plan(0, probe), c, options.prefetch_factor);
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
               options.rank, text.c_str(), chosen);
  return chosen;
}

Loader::Loader(detail::Source source, LoaderOptions options)
    : Loader(std::make_shared<const detail::Source>(std::move(source)), options) {}

Loader::Loader(std::shared_ptr<const detail::Source> source, LoaderOptions options) {
  DistributedSampler sampler(sampler_options(source->size, options));
  auto stage = detail::make_device_stage(options.device, options.pin_memory);
  state_.reset(new State{std::move(source), std::move(stage), options, std::move(sampler),
                         options.num_workers});
}

Loader::Loader(std::shared_ptr<const RowDataset> dataset, LoaderOptions options)
    : Loader(detail::row_source(std::move(dataset)), options) {}

Loader::~Loader() = default;
Loader::Loader(Loader&&) noexcept = default;
Loader& Loader::operator=(Loader&&) noexcept = default;

Loader::Iterator Loader::begin() {
  State& st = *state_;
  if (st.workers == kAutoWorkers) {
    st.sampler.set_epoch(st.next_epoch);
    st.workers = st.choose_workers();
  }
  st.sampler.set_epoch(st.next_epoch++);
  const int64_t first = std::min(st.skip, st.num_batches());
  st.skip = 0;
  *st.progress = detail::Progress{st.sampler.epoch(), first};
  auto run = std::make_unique<detail::EpochRun>(st.source, st.stage, st.plan(first, st.num_batches()),
                                                st.workers, st.options.prefetch_factor);
  return Iterator(std::move(run), st.last_span, st.progress);
}

Loader Loader::with_place(int rank, int world_size, c10::Device device) const {
  LoaderOptions o = state_->options;
  o.rank = rank;
  o.world_size = world_size;
  o.device = device;
  return Loader(state_->source, o);
}

const ShardSpan& Loader::last_span() const { return *state_->last_span; }

void Loader::set_epoch(int64_t epoch) { state_->next_epoch = epoch; }
int64_t Loader::epoch() const { return state_->next_epoch; }
void Loader::skip_first_batches(int64_t n) {
  if (n < 0) throw UsageError("Loader::skip_first_batches: n is " + std::to_string(n) + "; it must be >= 0");
  state_->skip = n;
}
LoaderPosition Loader::position() const {
  const detail::Progress& p = *state_->progress;
  if (p.epoch >= 0 && p.handed < state_->num_batches()) return {p.epoch, p.handed};
  return {state_->next_epoch, state_->skip};
}
void Loader::set_position(const LoaderPosition& pos) {
  if (pos.epoch < 0) throw UsageError("Loader::set_position: epoch is " + std::to_string(pos.epoch) + "; it must be >= 0");
  skip_first_batches(pos.batch);
  state_->next_epoch = pos.epoch;
  *state_->progress = detail::Progress{};
}
int64_t Loader::num_batches() const { return state_->num_batches(); }
int64_t Loader::dataset_size() const { return state_->source->size; }
int Loader::num_workers() const { return state_->workers; }
const LoaderOptions& Loader::options() const { return state_->options; }
const DistributedSampler& Loader::sampler() const { return state_->sampler; }

// ---- iteration -----------------------------------------------------------------------------

Loader::Iterator::Iterator(std::unique_ptr<detail::EpochRun> run, std::shared_ptr<ShardSpan> last_span,
                           std::shared_ptr<detail::Progress> progress)
    : run_(std::move(run)), last_span_(std::move(last_span)), progress_(std::move(progress)) {
  ++*this;
}
Loader::Iterator::Iterator() = default;
Loader::Iterator::Iterator(Iterator&&) noexcept = default;
Loader::Iterator& Loader::Iterator::operator=(Iterator&&) noexcept = default;
Loader::Iterator::~Iterator() = default;

Loader::Iterator& Loader::Iterator::operator++() {
  if (!run_) {
    current_.reset();
    return *this;
  }
  try {
    Batch b;
    if (run_->next(b)) {
      *last_span_ = b.span;
      progress_->handed = b.index + 1;
      current_ = std::move(b);
      return *this;
    }
  } catch (...) {
    current_.reset();
    run_.reset();  // joins the workers before the error leaves
    throw;
  }
  current_.reset();
  run_.reset();
  return *this;
}

}  // namespace xlaunch
