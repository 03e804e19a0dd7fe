#include "state/loader_state.h"

#include <algorithm>

#include "data/stream_batches.h"

namespace xlaunch::checkpoint {

using detail::stream_part_index;

namespace {

std::string key_of(size_t loader) { return "loader." + std::to_string(loader) + "."; }
std::string rank_key(size_t loader, int64_t rank) { return key_of(loader) + "rank." + std::to_string(rank) + "."; }

void save_stream_position(const Loader& l, size_t i, int world, KeyValues& state, std::ostream& meta) {
  const std::string k = key_of(i);
  const int64_t parts = l.options().parts_per_rank * world;
  state[k + "stream"] = "1";
  state[k + "parts"] = std::to_string(parts);
  // For people and for the common keys: rank 0's (every rank's own are under loader.<i>.rank.<r>).
  state[k + "epoch"] = std::to_string(get_int(state, rank_key(i, 0) + "epoch"));
  state[k + "batch"] = std::to_string(get_int(state, rank_key(i, 0) + "batch"));
  int64_t handed = 0;
  for (int64_t p = 0; p < parts; ++p) handed += get_int(state, k + "part." + std::to_string(p));
  meta << "loader " << i << " streaming epoch " << state[k + "epoch"] << ": " << handed << " records of its " << parts
       << " parts handed over\n";
}

}  // namespace

bool any_stream(const std::vector<std::unique_ptr<Loader>>& loaders) {
  for (const auto& l : loaders)
    if (l->is_stream()) return true;
  return false;
}

std::string stream_positions_text(const std::vector<std::unique_ptr<Loader>>& loaders, int rank, int world) {
  KeyValues kv;
  for (size_t i = 0; i < loaders.size(); ++i) {
    if (!loaders[i]->is_stream()) continue;
    const LoaderPosition pos = loaders[i]->position();
    kv[rank_key(i, rank) + "epoch"] = std::to_string(pos.epoch);
    kv[rank_key(i, rank) + "batch"] = std::to_string(pos.batch);
    kv[rank_key(i, rank) + "next_part"] = std::to_string(pos.next_part);
    for (size_t j = 0; j < pos.part_records.size(); ++j)
      kv[key_of(i) + "part." + std::to_string(stream_part_index(static_cast<int64_t>(j), rank, world))] =
          std::to_string(pos.part_records[j]);
  }
  return key_values_text(kv);
}

void save_loader_positions(const std::vector<std::unique_ptr<Loader>>& loaders, int world, KeyValues& state,
                           std::ostream& meta, const std::vector<std::string>& stream_texts) {
  for (const std::string& text : stream_texts)
    for (auto& [key, value] : parse_key_values(text)) state[key] = value;
  for (size_t i = 0; i < loaders.size(); ++i) {
    const Loader& l = *loaders[i];
    if (l.is_stream()) {
      save_stream_position(l, i, world, state, meta);
      continue;
    }
    const LoaderPosition pos = l.position();
    const std::string k = "loader." + std::to_string(i) + ".";
    state[k + "epoch"] = std::to_string(pos.epoch);
    state[k + "batch"] = std::to_string(pos.batch);
    state[k + "num_batches"] = std::to_string(l.num_batches());
    // What a resume on another world size or batch size needs: the positions of the epoch's global
    // order already read, and the layout they were read in.
    state[k + "consumed"] = std::to_string(pos.consumed);
    state[k + "global_batch"] = std::to_string(l.options().batch_size * world);
    state[k + "dataset_size"] = std::to_string(l.dataset_size());
    meta << "loader " << i << " epoch " << pos.epoch << " next batch " << pos.batch << " of " << l.num_batches()
         << " consumed " << pos.consumed << " of " << l.dataset_size() << "\n";
  }
}

namespace {

// The global positions of the epoch read before the save, from a checkpoint that predates the
// "consumed" key: k batches of the saved global batch (every checkpoint since the global batch was
// saved), or -1 when the checkpoint has no global batch either.
int64_t consumed_of(const KeyValues& state, const std::string& k) {
  if (state.count(k + "consumed")) return get_int(state, k + "consumed");
  if (state.count(k + "global_batch")) return get_int(state, k + "batch") * get_int(state, k + "global_batch");
  return -1;
}

}  // namespace

// Rank r's shard holds global positions r, r + W, r + 2W, ... of the epoch's order (sampler.h), so
// after k batches of b the ranks together have read the first k*b*W positions, whatever W is. The
// checkpoint records that count ("consumed"), and the loader continues the epoch from there on any
// world size and batch size: every sample not yet read, once (Loader::set_position). On the same
// layout it is exactly a skip of k batches, as an uninterrupted run.
void check_loader_positions(const std::vector<std::unique_ptr<Loader>>& loaders, int world, const KeyValues& state) {
  for (size_t i = 0; i < loaders.size(); ++i) {
    const Loader& l = *loaders[i];
    const bool saved_stream = state.count(key_of(i) + "stream") > 0;
    const std::string name = "load_state: loader " + std::to_string(i);
    if (saved_stream != l.is_stream())
      throw UsageError(name + " was saved as a " + (saved_stream ? "streaming" : "sized") + " loader and is prepared as a " +
                       (l.is_stream() ? "streaming" : "sized") + " one; prepare the same loaders, in the same order, "
                       "before calling load_state");
    if (!saved_stream) continue;
    const int64_t saved_parts = get_int(state, key_of(i) + "parts"), parts = l.options().parts_per_rank * world;
    if (saved_parts != parts)
      throw UsageError(name + " (streaming) was saved reading " + std::to_string(saved_parts) + " parts; this job reads " +
                       std::to_string(parts) + " (" + std::to_string(world) + " processes x parts_per_rank " +
                       std::to_string(l.options().parts_per_rank) + "). A part's records are the dataset's to choose, "
                       "so positions in " + std::to_string(saved_parts) + " parts say nothing about " +
                       std::to_string(parts) + ": set parts_per_rank so that processes x parts_per_rank = " +
                       std::to_string(saved_parts) + ", or start the epoch afresh without load_state");
    const int64_t saved_world = get_int(state, "world_size"), epoch = get_int(state, rank_key(i, 0) + "epoch");
    for (int64_t r = 1; r < saved_world && saved_world != world; ++r)
      if (get_int(state, rank_key(i, r) + "epoch") != epoch)
        throw UsageError(name + " (streaming) was saved with rank 0 in epoch " + std::to_string(epoch) + " and rank " +
                         std::to_string(r) + " in epoch " + std::to_string(get_int(state, rank_key(i, r) + "epoch")) +
                         "; on another world size its parts can only be dealt afresh within one epoch: resume on " +
                         std::to_string(saved_world) + " processes");
  }
}

namespace {

// Rank r's saved position on the same world size; on another one (the same parts, dealt to other
// ranks), every part from its own record, the batches counted and dealt afresh.
void restore_stream_position(Loader& l, size_t i, int world, int64_t saved_world, const KeyValues& state,
                             const std::function<void(const std::string&)>& log) {
  const int rank = l.options().rank;
  const bool same = saved_world == world;
  const std::string rk = rank_key(i, same ? rank : 0);
  LoaderPosition pos;
  pos.epoch = get_int(state, rk + "epoch");
  pos.batch = same ? get_int(state, rk + "batch") : 0;
  pos.next_part = same ? get_int(state, rk + "next_part") : 0;
  for (int64_t j = 0; j < l.options().parts_per_rank; ++j)
    pos.part_records.push_back(get_int(state, key_of(i) + "part." + std::to_string(stream_part_index(j, rank, world))));
  if (!same) {
    log("load_state: loader " + std::to_string(i) + " (streaming) was saved by " + std::to_string(saved_world) +
        " processes; this job's " + std::to_string(world) + " read the same " + std::to_string(l.options().parts_per_rank * world) +
        " parts, each from the record after the last one handed over: every record of epoch " + std::to_string(pos.epoch) +
        " not yet read is read once, in another order of batches");
  }
  l.set_position(pos);
}

}  // namespace

void restore_loader_positions(std::vector<std::unique_ptr<Loader>>& loaders, int world, int64_t saved_world,
                              const KeyValues& state, const std::function<void(const std::string&)>& log) {
  for (size_t i = 0; i < loaders.size(); ++i) {
    const std::string k = "loader." + std::to_string(i) + ".";
    Loader& l = *loaders[i];
    if (l.is_stream()) {
      restore_stream_position(l, i, world, saved_world, state, log);
      continue;
    }
    const std::string name = "load_state: loader " + std::to_string(i);
    const int64_t epoch = get_int(state, k + "epoch"), batch = get_int(state, k + "batch");
    const int64_t saved_batches = get_int(state, k + "num_batches");
    const int64_t batch_size = l.options().batch_size, n = l.dataset_size();
    const int64_t consumed = consumed_of(state, k);
    if (consumed < 0) {  // a checkpoint from before the global batch was saved
      const bool same = saved_world == world && saved_batches == l.num_batches();
      if (batch > 0 && !same)
        log(name + " was saved at batch " + std::to_string(batch) + " of " + std::to_string(saved_batches) +
            " in epoch " + std::to_string(epoch) + " with " + std::to_string(saved_world) +
            " processes; this job has " + std::to_string(world) + " processes and " +
            std::to_string(l.num_batches()) + " batches per epoch, and the checkpoint (from an older xlaunch) "
            "does not say which samples were read: epoch " + std::to_string(epoch) + " restarts from its first batch");
      l.set_position(LoaderPosition{epoch, same ? batch : 0, 0});
      continue;
    }
    const int64_t saved_n = state.count(k + "dataset_size") ? get_int(state, k + "dataset_size") : n;
    if (consumed > 0 && saved_n != n) {
      log(name + " was saved at sample " + std::to_string(consumed) + " of " + std::to_string(saved_n) +
          " in epoch " + std::to_string(epoch) + "; this job's dataset has " + std::to_string(n) +
          " samples, so the epoch's order is another one: epoch " + std::to_string(epoch) +
          " restarts from its first batch");
      l.set_position(LoaderPosition{epoch, 0, 0});
      continue;
    }
    l.set_position(LoaderPosition{epoch, 0, consumed});
    const int64_t saved_batch_size = state.count(k + "global_batch") && saved_world > 0
                                         ? get_int(state, k + "global_batch") / saved_world
                                         : batch_size;
    if (consumed == 0 || (saved_world == world && saved_batch_size == batch_size)) continue;
    // Say what this job reads of the epoch: the rest, evened out over its processes.
    SamplerOptions rest = l.sampler().options();
    rest.rank = 0;
    rest.world_size = world;
    const int64_t reads = std::min(shard_size(rest, consumed) * world, n - consumed);
    const bool other_batch = saved_batch_size != batch_size;
    log(name + " was saved at sample " + std::to_string(consumed) + " of " + std::to_string(n) + " in epoch " +
        std::to_string(epoch) + " by " + std::to_string(saved_world) + " processes" +
        (other_batch ? " of batch " + std::to_string(saved_batch_size) : "") + "; this job has " +
        std::to_string(world) + (other_batch ? " of batch " + std::to_string(batch_size) : "") +
        ": it continues with the " + std::to_string(reads) + " samples not yet read" +
        (reads < n - consumed ? " (drop_last leaves out the last " + std::to_string(n - consumed - reads) + ")" : ""));
  }
}

}  // namespace xlaunch::checkpoint
