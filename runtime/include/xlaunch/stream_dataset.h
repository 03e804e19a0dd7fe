// A dataset with no size (PyTorch's IterableDataset): files, sockets, generated records. The
// Loader (loader.h) reads it as P = world_size x parts_per_rank parts, each read by one reader in
// record order, and deals every part to exactly one rank, so that each record is read once per
// pass (epoch).
//
//   struct Lines : xlaunch::StreamDataset {
//     std::unique_ptr<xlaunch::StreamReader> open(xlaunch::StreamPart part, int64_t epoch) const override {
//       // e.g. the files f with f % part.count == part.index, or the byte range
//       // [size * index / count, size * (index + 1) / count) of one file, read record by record
//       return std::make_unique<LinesReader>(files_, part);
//     }
//   };
//   opt.parts_per_rank = 4;  // fixed: the batches are then the same whatever num_workers is
//   xlaunch::Loader loader(std::make_shared<Lines>(...), opt);
//
// How the parts become batches (rank r): its parts are r, r + W, r + 2W, ... (W = world_size), the
// j-th of them read by its own StreamReader. Each batch is batch_size consecutive records of one
// part (the last batch of a part may be short); the rank's batches take its parts in turn
// (j = 0, 1, ..., parts_per_rank - 1, 0, 1, ...), passing over parts that have ended. So the batches
// are a function of the parts' records, world_size, parts_per_rank and batch_size only: the same
// for any num_workers, and on W ranks, while no part has ended, the W ranks' batches of one step
// are those of one process reading the same W x parts_per_rank parts. The pass ends on a rank when
// all its parts have ended.
//
// The position (Loader::position, Accelerator::save_state) is the number of records of each part
// handed to the training loop. A resume opens each part again and calls skip(n) with that number:
// every record not yet handed over is read, once, and none twice.
//
// Threads: open() is called from the loader's worker threads, concurrently for different parts; a
// reader is used by one thread at a time (possibly not always the same thread). open() must not
// modify shared state. For the same batches in every run (and an exact resume), a part's records
// must be a function of (part, epoch): seed generators or shuffles with them.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>

namespace xlaunch {

// Part `index` of `count` (0 <= index < count): which share of the stream one reader reads.
struct StreamPart {
  int64_t index = 0;
  int64_t count = 1;
};

// One record. Every record of a pass has the same data shape and dtype (and the same target shape
// and dtype; target undefined when the dataset has no targets): a batch is one contiguous tensor.
struct StreamSample {
  at::Tensor data;
  at::Tensor target;
};

// Reads one part of one pass, in record order.
class StreamReader {
 public:
  virtual ~StreamReader() = default;
  // The part's next record, or std::nullopt at its end (after which next() is not called again).
  // Throw to report a bad record: the training thread gets a SampleError naming the part and the
  // record's number in it.
  virtual std::optional<StreamSample> next() = 0;
  // Passes over the part's next n records (on a resume: the records handed over before the
  // checkpoint). The default reads them with next() and throws them away; override it where the
  // source can seek (fixed-size records, an index of offsets, a generator that can jump).
  // Returns how many were passed over: fewer than n only when the part ended first.
  virtual int64_t skip(int64_t n);
};

class StreamDataset {
 public:
  virtual ~StreamDataset() = default;
  // A reader of part `part` of pass `epoch`, at the part's first record. Throw when it cannot be
  // opened (the training thread gets the error, naming the part); never return nullptr.
  virtual std::unique_ptr<StreamReader> open(StreamPart part, int64_t epoch) const = 0;
};

}  // namespace xlaunch
