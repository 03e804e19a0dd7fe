// The prepared loaders' positions in a checkpoint (rank0/trainer_state.txt, keys loader.<i>.*),
// and putting them back on load, on this or another world size or batch size
// (docs/checkpointing.md).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "state/trainer_state.h"
#include "xlaunch/loader.h"

namespace xlaunch::checkpoint {

// Adds every loader's position to `state`, and a line per loader to `meta` (for people).
void save_loader_positions(const std::vector<std::unique_ptr<Loader>>& loaders, int world, KeyValues& state,
                           std::ostream& meta);

// Sets every loader's position from `state`, saved by `saved_world` processes, in this job of
// `world`. `log` takes the lines rank 0 prints about what carried over.
void restore_loader_positions(std::vector<std::unique_ptr<Loader>>& loaders, int world, int64_t saved_world,
                              const KeyValues& state, const std::function<void(const std::string&)>& log);

}  // namespace xlaunch::checkpoint
