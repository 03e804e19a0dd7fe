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

// Streaming loaders (Loader::is_stream) stand differently on every rank: each rank writes its
// streaming loaders' positions as trainer_state lines (loader.<i>.rank.<r>.{epoch,batch,next_part}
// and loader.<i>.part.<p> for each of its parts p: the records handed over), rank 0 gathers them.
bool any_stream(const std::vector<std::unique_ptr<Loader>>& loaders);
std::string stream_positions_text(const std::vector<std::unique_ptr<Loader>>& loaders, int rank, int world);

// Adds every loader's position to `state`, and a line per loader to `meta` (for people).
// `stream_texts`: every rank's stream_positions_text, in rank order (empty when no loader streams).
void save_loader_positions(const std::vector<std::unique_ptr<Loader>>& loaders, int world, KeyValues& state,
                           std::ostream& meta, const std::vector<std::string>& stream_texts = {});

// Throws UsageError when a saved position cannot be restored into this job's loaders: a streaming
// loader saved as a sized one or the other way round, or a streaming loader saved with another
// total number of parts (world_size x parts_per_rank). Call before anything is restored.
void check_loader_positions(const std::vector<std::unique_ptr<Loader>>& loaders, int world, const KeyValues& state);

// Sets every loader's position from `state`, saved by `saved_world` processes, in this job of
// `world`. `log` takes the lines rank 0 prints about what carried over. A streaming loader resumes
// exactly: on the same world size, as the uninterrupted run; on another one with the same total
// number of parts, each part from its own saved record (every record once), in another batch order.
void restore_loader_positions(std::vector<std::unique_ptr<Loader>>& loaders, int world, int64_t saved_world,
                              const KeyValues& state, const std::function<void(const std::string&)>& log);

}  // namespace xlaunch::checkpoint
