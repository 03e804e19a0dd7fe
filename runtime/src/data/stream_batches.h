// A streaming dataset's pass on one rank, as the keys an EpochRun loads (epoch_run.h): key k is
// the next batch of this rank's part j = k mod parts_per_rank. Private to the loader; the user's
// side is stream_dataset.h.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "data/epoch_run.h"
#include "xlaunch/extend/communicator.h"
#include "xlaunch/stream_dataset.h"

namespace xlaunch::detail {

struct StreamPlan {
  std::shared_ptr<const StreamDataset> dataset;
  int64_t epoch = 0;
  int64_t batch_size = 1;
  int rank = 0;
  int world_size = 1;
  int64_t parts_per_rank = 1;
  // Per part j of this rank: the records handed over before this pass resumed (skipped on open).
  std::vector<int64_t> skip;
};

// The index among all world_size x parts_per_rank parts of this rank's j-th part: the parts of a
// rank are r, r + W, r + 2W, ..., so that the W ranks' j-th parts are the consecutive W parts
// j*W .. j*W + W - 1 (one process reading all of them in turn takes them in the same order).
inline int64_t stream_part_index(int64_t j, int rank, int world_size) { return j * world_size + rank; }

// The batches of `plan`, from key first_key (0 <= first_key < parts_per_rank: the part the first
// batch comes from).
std::shared_ptr<BatchMaker> stream_batches(StreamPlan plan, int64_t first_key);

// At each batch of a streaming loader on several ranks, the ranks tell each other whether they have
// one (one allgather of one byte per rank). Returns true when every rank has a batch, false when
// none has (the pass is over). When only some have: with drop_last the pass ends on every rank
// (rank 0 says which ranks left which batch unread) and false is returned; without, every rank
// throws the same UsageError naming the ranks that ran out. `handed`: the batches of the pass
// handed over so far on this rank.
bool every_rank_has_batch(Communicator& comm, bool have, int64_t epoch, int64_t handed, bool drop_last);

}  // namespace xlaunch::detail
