#include "xlaunch/loader.h"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <string>

#include "profile/step_clock.h"
#include "data/epoch_run.h"
#include "data/loader_stage.h"
#include "data/stream_batches.h"

namespace xlaunch {


// ---- the loader ----------------------------------------------------------------------------

struct Loader::State {
  std::shared_ptr<const detail::Source> source;
  std::shared_ptr<const detail::DeviceStage> stage;
  LoaderOptions options;
  DistributedSampler sampler;
  int workers = 0;
  // Where the next begin() starts: epoch next_epoch, at global position next_offset, skipping
  // `skip` batches of that.
  int64_t next_epoch = 0;
  int64_t next_offset = 0;
  int64_t skip = 0;
  std::shared_ptr<detail::Tracking> tracking = std::make_shared<detail::Tracking>();
  // A streaming loader (source is then null), and where its next begin() starts: the records of
  // each part to pass over and the part of the first batch (`skip` numbers its batches).
  std::shared_ptr<const StreamDataset> stream;
  std::vector<int64_t> stream_skip;
  int64_t stream_next_part = 0;

  detail::EpochPlan plan(int64_t first, int64_t end) const {
    detail::EpochPlan p;
    p.shard = sampler.indices();
    p.batch_size = options.batch_size;
    p.first_batch = first;
    p.end_batch = end;
    p.epoch = sampler.epoch();
    p.rank = options.rank;
    p.span = sampler.span(0);
    p.augment = augmentation();
    return p;
  }
  detail::Augmentation augmentation() const {
    return detail::Augmentation{options.augment, options.seed, options.device.is_cpu()};
  }
  int64_t global_batch() const { return options.batch_size * sampler.options().world_size; }
  // This rank's batches of an epoch started at global position `offset`.
  int64_t batches_from(int64_t offset) const {
    const int64_t shard = shard_size(sampler.options(), offset), b = options.batch_size;
    return options.drop_last ? shard / b : (shard + b - 1) / b;
  }
  // A streaming loader's epoch: its parts from where set_position left them, else from their start.
  std::unique_ptr<detail::EpochRun> begin_stream() {
    const int64_t parts = options.parts_per_rank;
    if (workers == kAutoWorkers) {
      workers = static_cast<int>(std::min<int64_t>(parts, 8));
      std::fprintf(stderr, "[xlaunch rank %d] loader: num_workers=auto on a streaming dataset: %d (one per part, "
                   "at most 8; a stream cannot be read twice to measure)\n", options.rank, workers);
    }
    detail::StreamPlan plan{stream, next_epoch, options.batch_size, options.rank, options.world_size, parts,
                            stream_skip};
    std::vector<int64_t> records = stream_skip.empty() ? std::vector<int64_t>(parts, 0) : stream_skip;
    detail::Progress& p = tracking->progress;
    p = detail::Progress{next_epoch, skip, detail::BatchMaker::kNoEnd, 0, 0, std::move(records), stream_next_part};
    auto run = std::make_unique<detail::EpochRun>(detail::stream_batches(std::move(plan), stream_next_part),
                                                  stage, stream_next_part, skip, next_epoch, workers,
                                                  options.prefetch_factor, augmentation());
    ++next_epoch;
    skip = 0;
    stream_skip.clear();
    stream_next_part = 0;
    return run;
  }
  void set_stream_position(const LoaderPosition& pos, const std::string& at) {
    const auto parts = static_cast<size_t>(options.parts_per_rank);
    if (!pos.part_records.empty() && pos.part_records.size() != parts)
      throw UsageError("Loader::set_position: the position has records of " + std::to_string(pos.part_records.size()) +
                       " parts per rank, this streaming loader reads " + std::to_string(parts) + at +
                       "; resume with the parts_per_rank (and world size) it was saved with");
    for (const int64_t r : pos.part_records)
      if (r < 0) throw UsageError("Loader::set_position: a part's record count is negative (" + std::to_string(r) + ")" + at);
    if (pos.next_part < 0 || pos.next_part >= options.parts_per_rank)
      throw UsageError("Loader::set_position: next_part is " + std::to_string(pos.next_part) + "; it must be in [0, " +
                       std::to_string(parts) + ")" + at);
    next_epoch = pos.epoch;
    skip = pos.batch;
    stream_skip = pos.part_records;
    stream_next_part = pos.next_part;
    tracking->progress = detail::Progress{};
  }
  // Global positions read after `handed` batches of an epoch started at `offset`: the last batch
  // may be short, and padding is not a position of its own.
  int64_t consumed(int64_t offset, int64_t handed, int64_t real_positions) const {
    return std::min(offset + handed * global_batch(), std::max(offset, real_positions));
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
  // A dataset that is already this rank's shard is read whole, as in a world of one.
  s.rank = o.already_sharded ? 0 : o.rank;
  s.world_size = o.already_sharded ? 1 : o.world_size;
  s.seed = o.seed;
  s.shuffle = o.shuffle;
  s.drop_last = o.drop_last;
  s.even_batches = o.even_batches;
  return s;
}

}  // namespace

Loader::Loader(detail::Source source, LoaderOptions options)
    : Loader(std::make_shared<const detail::Source>(std::move(source)), nullptr, options) {}

Loader::Loader(std::shared_ptr<const detail::Source> source, std::shared_ptr<const StreamDataset> stream,
               LoaderOptions options) {
  DistributedSampler sampler(sampler_options(source ? source->size : 0, options));
  if (stream && options.parts_per_rank < 1)
    throw UsageError("Loader: parts_per_rank is " + std::to_string(options.parts_per_rank) +
                     "; a streaming dataset is read as world_size x parts_per_rank parts, so it must be >= 1");
  auto stage = detail::make_device_stage(options.device, options.pin_memory);
  state_.reset(new State{std::move(source), std::move(stage), options, std::move(sampler),
                         options.num_workers});
  state_->stream = std::move(stream);
  state_->tracking->drop_last = options.drop_last;
}

Loader::Loader(std::shared_ptr<const RowDataset> dataset, LoaderOptions options)
    : Loader(detail::row_source(std::move(dataset)), options) {}

Loader::Loader(std::shared_ptr<const StreamDataset> dataset, LoaderOptions options)
    : Loader(nullptr, dataset ? std::move(dataset) : throw UsageError("Loader: the StreamDataset pointer is null"),
             options) {}

Loader::~Loader() = default;
Loader::Loader(Loader&&) noexcept = default;
Loader& Loader::operator=(Loader&&) noexcept = default;

Loader::Iterator Loader::begin() {
  State& st = *state_;
  if (st.stream) return Iterator(st.begin_stream(), st.tracking);
  st.sampler.set_epoch(st.next_epoch);
  st.sampler.set_offset(st.next_offset);
  const int64_t batches = st.batches_from(st.next_offset);
  if (st.workers == kAutoWorkers) {
    st.workers = detail::choose_workers(
        st.source, st.stage, [&st](int64_t first, int64_t end) { return st.plan(first, end); }, batches,
        st.options.prefetch_factor, st.options.rank);
  }
  const int64_t first = std::min(st.skip, batches);
  st.tracking->progress = detail::Progress{st.next_epoch, first, batches, st.next_offset, st.sampler.real_positions()};
  ++st.next_epoch;
  st.next_offset = 0;
  st.skip = 0;
  auto run = std::make_unique<detail::EpochRun>(st.source, st.stage, st.plan(first, batches), st.workers,
                                                st.options.prefetch_factor);
  return Iterator(std::move(run), st.tracking);
}

Loader Loader::with_place(int rank, int world_size, c10::Device device) const {
  LoaderOptions o = state_->options;
  o.rank = rank;
  o.world_size = world_size;
  o.device = device;
  return Loader(state_->source, state_->stream, o);
}

const ShardSpan& Loader::last_span() const { return state_->tracking->last_span; }

void Loader::set_epoch(int64_t epoch) { state_->next_epoch = epoch; }
int64_t Loader::epoch() const { return state_->next_epoch; }
void Loader::skip_first_batches(int64_t n) {
  if (state_->stream)
    throw UsageError("Loader::skip_first_batches: a streaming loader cannot skip batches by number (which records "
                     "they hold depends on where each part ends); resume it with set_position(position()) instead");
  if (n < 0) throw UsageError("Loader::skip_first_batches: n is " + std::to_string(n) + "; it must be >= 0");
  state_->skip = n;
}
LoaderPosition Loader::position() const {
  const State& st = *state_;
  const detail::Progress& p = st.tracking->progress;
  if (st.stream) {
    LoaderPosition pos{st.next_epoch, st.skip, 0, st.stream_skip, st.stream_next_part};
    if (p.epoch >= 0 && p.handed < p.batches) pos = {p.epoch, p.handed, 0, p.part_records, p.next_part};
    if (pos.part_records.empty()) pos.part_records.assign(st.options.parts_per_rank, 0);
    pos.consumed = std::accumulate(pos.part_records.begin(), pos.part_records.end(), int64_t{0});
    return pos;
  }
  if (p.epoch >= 0 && p.handed < p.batches)
    return {p.epoch, p.handed, st.consumed(p.offset, p.handed, p.real_positions)};
  // Before begin(): what set_position / skip_first_batches asked for.
  DistributedSampler pending = st.sampler;
  pending.set_offset(st.next_offset);
  return {st.next_epoch, st.skip, st.consumed(st.next_offset, st.skip, pending.real_positions())};
}
void Loader::set_position(const LoaderPosition& pos) {
  State& st = *state_;
  const std::string at = " (epoch " + std::to_string(pos.epoch) + ", batch " + std::to_string(pos.batch) +
                         ", consumed " + std::to_string(pos.consumed) + ")";
  if (pos.epoch < 0 || pos.batch < 0)
    throw UsageError("Loader::set_position: the epoch and batch must be >= 0" + at);
  if (st.stream) {
    st.set_stream_position(pos, at);
    return;
  }
  if (pos.consumed < 0 || pos.consumed > dataset_size())
    throw UsageError("Loader::set_position: consumed must be within the dataset's " +
                     std::to_string(dataset_size()) + " samples" + at +
                     "; was the position saved for another dataset?");
  st.next_epoch = pos.epoch;
  if (pos.consumed == 0) {
    st.next_offset = 0;
    st.skip = pos.batch;
  } else if (pos.consumed % st.global_batch() == 0) {
    // A boundary of this loader's batches: the plain epoch, skipping, as if never interrupted.
    st.next_offset = 0;
    st.skip = pos.consumed / st.global_batch();
  } else {
    st.next_offset = pos.consumed;
    st.skip = 0;
  }
  st.tracking->progress = detail::Progress{};
}
void Loader::set_epoch_end_callback(std::function<void(int64_t epoch)> fn) {
  state_->tracking->on_epoch_end = std::move(fn);
}

void Loader::set_next_batch_callback(std::function<void()> fn) { state_->tracking->on_next_batch = std::move(fn); }
void Loader::set_stream_agreement(std::shared_ptr<Communicator> comm) {
  state_->tracking->stream_agreement = std::move(comm);
}
bool Loader::is_stream() const { return state_->stream != nullptr; }
int64_t Loader::num_batches() const { return state_->stream ? -1 : state_->batches_from(0); }
int64_t Loader::batches_left() const {
  if (state_->stream) return -1;  // a stream's end is known only once reached
  const detail::Progress& p = state_->tracking->progress;
  return p.epoch < 0 ? -1 : p.batches - p.handed;
}
int64_t Loader::dataset_size() const { return state_->stream ? -1 : state_->source->size; }
int Loader::num_workers() const { return state_->workers; }
const LoaderOptions& Loader::options() const { return state_->options; }
const DistributedSampler& Loader::sampler() const { return state_->sampler; }

// ---- iteration -----------------------------------------------------------------------------

Loader::Iterator::Iterator(std::unique_ptr<detail::EpochRun> run, std::shared_ptr<detail::Tracking> tracking)
    : run_(std::move(run)), tracking_(std::move(tracking)) {
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
  if (current_ && tracking_->on_next_batch) tracking_->on_next_batch();
  try {
    Batch b;
    int64_t key = 0;
    bool have = false;
    {
      const profile::PhaseScope phase(profile::kDataWait);
      have = run_->next(b, &key);
    }
    detail::Progress& progress = tracking_->progress;
    // Outside the data wait: time spent here is waiting for the other ranks' data.
    if (tracking_->stream_agreement &&
        !detail::every_rank_has_batch(*tracking_->stream_agreement, have, run_->epoch(), progress.handed,
                                      tracking_->drop_last))
      have = false;
    if (have) {
      profile::add_samples(static_cast<uint64_t>(b.size()));
      tracking_->last_span = b.span;
      progress.handed = b.index + 1;
      if (!progress.part_records.empty()) {  // a stream: key k is the next batch of part k mod parts
        const auto parts = static_cast<int64_t>(progress.part_records.size());
        progress.part_records[key % parts] += b.size();
        progress.next_part = (key + 1) % parts;
      }
      current_ = std::move(b);
      return *this;
    }
  } catch (...) {
    current_.reset();
    run_.reset();  // joins the workers before the error leaves
    throw;
  }
  tracking_->progress.batches = tracking_->progress.handed;  // a stream's end is known only now
  const int64_t epoch = run_->epoch();
  current_.reset();
  run_.reset();
  if (tracking_->on_epoch_end) tracking_->on_epoch_end(epoch);
  return *this;
}

}  // namespace xlaunch
