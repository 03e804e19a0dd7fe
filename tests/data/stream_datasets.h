// Streaming datasets for the loader tests whose every record is known: the stream of records
// 0..n-1, part p of P holding the records i with i % P == p in increasing order. Record i has data
// [i, epoch] (float, integer-valued) and target i (int64).
#pragma once

#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/tensor.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "xlaunch/loader.h"

namespace xlaunch::test {

struct Records : xlaunch::StreamDataset {
  // fail_record: next() throws on this record (-1: never); lengths: when not empty, part p holds
  // records p, p + P, ... of which only the first lengths[p] (an uneven stream).
  explicit Records(int64_t n, int64_t fail_record = -1, std::vector<int64_t> lengths = {})
      : n(n), fail_record(fail_record), lengths(std::move(lengths)) {}

  struct Reader : xlaunch::StreamReader {
    Reader(const Records* ds, xlaunch::StreamPart part, int64_t epoch, int64_t left)
        : ds(ds), part(part), epoch(epoch), next_record(part.index), left(left) {}
    const Records* ds;
    xlaunch::StreamPart part;
    int64_t epoch;
    int64_t next_record;  // the record id next() returns
    int64_t left;         // records left in the part
    std::optional<xlaunch::StreamSample> next() override {
      if (left == 0 || next_record >= ds->n) return std::nullopt;
      const int64_t i = next_record;
      if (i == ds->fail_record) throw std::runtime_error("record " + std::to_string(i) + " is bad on purpose");
      next_record += part.count;
      --left;
      ++ds->read;
      return xlaunch::StreamSample{at::tensor({static_cast<float>(i), static_cast<float>(epoch)}),
                                   at::scalar_tensor(i, at::kLong)};
    }
    int64_t skip(int64_t k) override {  // a generator can jump
      const int64_t avail = std::min(left, (ds->n - next_record + part.count - 1) / part.count);
      const int64_t done = std::clamp<int64_t>(k, 0, std::max<int64_t>(avail, 0));
      next_record += done * part.count;
      left -= done;
      return done;
    }
  };

  std::unique_ptr<xlaunch::StreamReader> open(xlaunch::StreamPart part, int64_t epoch) const override {
    ++opened;
    const int64_t left = lengths.empty() ? n : lengths.at(static_cast<size_t>(part.index));
    return std::make_unique<Reader>(this, part, epoch, left);
  }

  int64_t n;
  int64_t fail_record;
  std::vector<int64_t> lengths;
  mutable std::atomic<int64_t> opened{0};
  mutable std::atomic<int64_t> read{0};  // records returned by next(), over all readers
};

inline xlaunch::LoaderOptions stream_options(int64_t batch, int workers, int64_t parts_per_rank, int rank = 0,
                                             int world = 1) {
  xlaunch::LoaderOptions o;
  o.batch_size = batch;
  o.num_workers = workers;
  o.parts_per_rank = parts_per_rank;
  o.rank = rank;
  o.world_size = world;
  return o;
}

// The targets of each batch, in order.
inline std::vector<std::vector<int64_t>> batch_targets(xlaunch::Loader& loader, int64_t max_batches = -1) {
  std::vector<std::vector<int64_t>> out;
  for (auto& b : loader) {
    const at::Tensor t = b.target.contiguous();
    out.emplace_back(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
    if (static_cast<int64_t>(out.size()) == max_batches) break;
  }
  return out;
}

}  // namespace xlaunch::test
