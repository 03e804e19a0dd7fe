#include "xlaunch/loader.h"

#include <algorithm>
#include <string>

#include "profile/step_clock.h"
#include "data/epoch_run.h"
#include "data/loader_stage.h"

namespace xlaunch {


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

}  // namespace

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
    st.workers = detail::choose_workers(
        st.source, st.stage, [&st](int64_t first, int64_t end) { return st.plan(first, end); }, st.num_batches(),
        st.options.prefetch_factor, st.options.rank);
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
    const profile::PhaseScope phase(profile::kDataWait);
    if (run_->next(b)) {
      profile::add_samples(static_cast<uint64_t>(b.size()));
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
