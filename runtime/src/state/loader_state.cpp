#include "state/loader_state.h"

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
    // What a resume on another world size needs to find the same place in the epoch's global order.
    state[k + "global_batch"] = std::to_string(l.options().batch_size * world);
    state[k + "dataset_size"] = std::to_string(l.dataset_size());
    meta << "loader " << i << " epoch " << pos.epoch << " next batch " << pos.batch << " of " << l.num_batches() << "\n";
  }
}

// A position within an epoch counts this world size's batches of this rank's shard. Rank r's shard
// holds global positions r, r + W, r + 2W, ... of the epoch's order (sampler.h), so after k batches
// the ranks together have read its first k x global-batch positions, whatever W is: with the same
// global batch (batch_size x world size) and dataset the position carries over to another world
// size exactly (an elastic job that keeps the global batch). Otherwise it names other samples,
// and the interrupted epoch restarts.
void restore_loader_positions(std::vector<std::unique_ptr<Loader>>& loaders, int world, int64_t saved_world,
                              const KeyValues& state, const std::function<void(const std::string&)>& log) {
  for (size_t i = 0; i < loaders.size(); ++i) {
    const std::string k = "loader." + std::to_string(i) + ".";
    const Loader& l = *loaders[i];
    LoaderPosition pos{get_int(state, k + "epoch"), get_int(state, k + "batch")};
    const int64_t saved_batches = get_int(state, k + "num_batches");
    const int64_t global_batch = l.options().batch_size * world;
    // Checkpoints from before these keys were saved have none: the epoch restarts.
    const bool same_global_order = state.count(k + "global_batch") && state.count(k + "dataset_size") &&
                                   get_int(state, k + "global_batch") == global_batch &&
                                   get_int(state, k + "dataset_size") == l.dataset_size() &&
                                   pos.batch < l.num_batches();
    if (pos.batch > 0 && saved_world != world && same_global_order) {
      log("load_state: loader " + std::to_string(i) + " was saved at batch " + std::to_string(pos.batch) +
          " of epoch " + std::to_string(pos.epoch) + " with " + std::to_string(saved_world) +
          " processes; this job has " + std::to_string(world) + " and the same global batch (" +
          std::to_string(global_batch) + "), so it continues there, with the samples not yet read");
    } else if (pos.batch > 0 && (saved_world != world || saved_batches != l.num_batches())) {
      log("load_state: loader " + std::to_string(i) + " was saved at batch " + std::to_string(pos.batch) + " of " +
          std::to_string(saved_batches) + " in epoch " + std::to_string(pos.epoch) + " with " +
          std::to_string(saved_world) + " processes; this job has " + std::to_string(world) + " processes and " +
          std::to_string(l.num_batches()) + " batches per epoch (global batch " + std::to_string(global_batch) +
          "), so the position cannot carry over: epoch " + std::to_string(pos.epoch) +
          " restarts from its first batch (keep the global batch to resume mid-epoch on another world size)");
      pos.batch = 0;
    }
    loaders[i]->set_position(pos);
  }
}

}  // namespace xlaunch::checkpoint
