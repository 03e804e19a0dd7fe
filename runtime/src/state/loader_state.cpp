#include "state/loader_state.h"

#include <algorithm>

namespace xlaunch::checkpoint {

void save_loader_positions(const std::vector<std::unique_ptr<Loader>>& loaders, int world, KeyValues& state,
                           std::ostream& meta) {
  for (size_t i = 0; i < loaders.size(); ++i) {
    const Loader& l = *loaders[i];
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
void restore_loader_positions(std::vector<std::unique_ptr<Loader>>& loaders, int world, int64_t saved_world,
                              const KeyValues& state, const std::function<void(const std::string&)>& log) {
  for (size_t i = 0; i < loaders.size(); ++i) {
    const std::string k = "loader." + std::to_string(i) + ".";
    Loader& l = *loaders[i];
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
