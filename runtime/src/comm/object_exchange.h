// Bytes of different lengths between ranks, under a size limit: what gather_object and
// broadcast_object send (the values encoded by object_codec.h). The sizes travel first, so every
// rank knows them before the bytes, and a value above the limit is refused on every rank alike,
// instead of one rank failing while the others wait for its bytes.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "xlaunch/extend/communicator.h"

namespace xlaunch {

// The message for values above `limit` bytes ("" when every one is within it), given each
// sender's (rank, size): names each rank above, its size and the limit, and the fix. `call`:
// "gather_object" or "broadcast_object".
std::string oversize_problem(const std::vector<std::pair<int, int64_t>>& sizes, int64_t limit, const std::string& call);

// Every rank's bytes, in rank order: an allgather of the sizes (refused on every rank when one is
// above `limit`), then one of the bytes padded to the longest. CPU communicator. Collective.
std::vector<std::string> gather_bytes(Communicator& comm, const std::string& mine, int64_t limit);

// Rank `root`'s bytes on every rank (the others' `mine` is ignored): a broadcast of the size
// (refused on every rank when above `limit`), then of the bytes. CPU communicator. Collective.
std::string broadcast_bytes(Communicator& comm, const std::string& mine, int root, int64_t limit);

}  // namespace xlaunch
