#include "data/stream_batches.h"

#include <ATen/ops/empty.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>

#include "xlaunch/error.h"

namespace xlaunch {

int64_t StreamReader::skip(int64_t n) {
  int64_t done = 0;
  while (done < n && next().has_value()) ++done;
  return done;
}

namespace detail {
namespace {

// Reads part j's records a batch at a time. The keys of one part are made in key order, one at a
// time (a reader is sequential), possibly by different workers: a worker that takes key k waits
// for its part's key k - parts_per_rank to be made. With parts_per_rank >= workers that wait is
// rare: the keys in flight are mostly of distinct parts.
class StreamBatches final : public BatchMaker {
 public:
  StreamBatches(StreamPlan plan, int64_t first_key) : plan_(std::move(plan)) {
    const int64_t parts = plan_.parts_per_rank;
    for (int64_t j = 0; j < parts; ++j) {
      parts_.push_back(std::make_unique<Part>());
      parts_.back()->next_key = j >= first_key ? j : j + parts;
    }
  }

  // A row's sample id: its part's global index x 2^40 + its record number in the part's pass.
  bool make(int64_t k, const HostAllocator& alloc, Batch& out, std::vector<int64_t>& ids) override {
    const int64_t K = plan_.parts_per_rank, j = k % K;
    Part& p = *parts_[j];
    std::unique_lock<std::mutex> lk(p.mu);
    p.turn.wait(lk, [&] { return p.next_key == k; });
    // Whatever happens below, the part's next key may be made afterwards.
    struct Advance {
      Part& p;
      int64_t K;
      ~Advance() {
        p.next_key += K;
        p.turn.notify_all();
      }
    } advance{p, K};
    if (p.done) return false;
    const StreamPart part{stream_part_index(j, plan_.rank, plan_.world_size), K * plan_.world_size};
    std::vector<at::Tensor> data, target;
    std::vector<int64_t> records;
    try {
      read_batch(p, part, data, target, records);
    } catch (...) {
      p.done = true;  // the error reaches the training thread at this key, which ends the pass
      p.reader.reset();
      throw;
    }
    if (static_cast<int64_t>(records.size()) < plan_.batch_size) {
      p.reader.reset();  // close the file as soon as the part is over
      part_ended(p, records.empty() ? k : k + K);
    }
    if (records.empty()) return false;
    ids.clear();
    for (int64_t r : records) ids.push_back((static_cast<int64_t>(part.index) << 40) + r);
    try {
      out.data = collate_rows(data, records, alloc, "data");
      if (!target.empty()) out.target = collate_rows(target, records, alloc, "target");
    } catch (const std::exception& e) {
      throw UsageError(where(part) + ", records " + std::to_string(records.front()) + ".." +
                       std::to_string(records.back()) + ": " + e.what());
    }
    out.span = ShardSpan{0, BatchMaker::kNoEnd, plan_.world_size, 0};  // no padding: every row is real
    return true;
  }

  int64_t end() const override { return end_.load(std::memory_order_acquire); }

 private:
  struct Part {
    std::mutex mu;
    std::condition_variable turn;
    int64_t next_key = 0;  // the key whose turn it is
    std::unique_ptr<StreamReader> reader;
    bool opened = false;
    bool done = false;      // ended (or failed): its later keys hold no batch
    int64_t read = 0;       // records of the pass read so far, those skipped on a resume included
  };

  std::string where(const StreamPart& part) const {
    return "stream part " + std::to_string(part.index) + " of " + std::to_string(part.count) + " (epoch " +
           std::to_string(plan_.epoch) + ", rank " + std::to_string(plan_.rank) + ")";
  }

  void open(Part& p, const StreamPart& part, int64_t skip) const {
    try {
      p.reader = plan_.dataset->open(part, plan_.epoch);
    } catch (...) {
      rethrow_as(p.read, "opening " + where(part));
    }
    if (!p.reader)
      throw UsageError("StreamDataset::open returned no reader for " + where(part) +
                       "; return a reader (one whose next() returns std::nullopt at once for an empty part)");
    if (skip == 0) return;
    int64_t skipped = 0;
    try {
      skipped = p.reader->skip(skip);
    } catch (...) {
      rethrow_as(p.read, "skipping the first " + std::to_string(skip) + " records of " + where(part));
    }
    if (skipped != skip)
      throw UsageError(where(part) + " ended after " + std::to_string(skipped) + " records while passing over the " +
                       std::to_string(skip) + " handed over before the checkpoint: the part does not hold the "
                       "records it held when the position was saved. Resume with the same data and the same "
                       "world_size x parts_per_rank (and parts whose records depend only on the part and the epoch)");
    p.read = skip;
  }

  void read_batch(Part& p, const StreamPart& part, std::vector<at::Tensor>& data, std::vector<at::Tensor>& target,
                  std::vector<int64_t>& records) const {
    const int64_t j = part.index / plan_.world_size;
    if (!p.opened) {
      p.opened = true;
      open(p, part, plan_.skip.empty() ? 0 : plan_.skip[j]);
    }
    while (static_cast<int64_t>(records.size()) < plan_.batch_size) {
      std::optional<StreamSample> s;
      try {
        s = p.reader->next();
      } catch (...) {
        rethrow_as(p.read, "reading record " + std::to_string(p.read) + " of " + where(part));
      }
      if (!s) break;
      if (!s->data.defined())
        throw SampleError(p.read, where(part) + ", record " + std::to_string(p.read) +
                                      ": its data tensor is undefined; every record needs data");
      if (!records.empty() && s->target.defined() == target.empty())
        throw SampleError(p.read, where(part) + ": record " + std::to_string(p.read) +
                                      (s->target.defined() ? " has a target and record " : " has no target but record ") +
                                      std::to_string(records.front()) + (s->target.defined() ? " had none" : " had one") +
                                      "; give targets to every record or to none");
      data.push_back(std::move(s->data));
      if (s->target.defined()) target.push_back(std::move(s->target));
      records.push_back(p.read++);
    }
  }

  // Inside a catch block: the current exception as a SampleError for `record`, saying `what` failed.
  [[noreturn]] static void rethrow_as(int64_t record, const std::string& what) {
    try {
      throw;
    } catch (const std::exception& e) {
      throw SampleError(record, what + " failed: " + e.what());
    } catch (...) {
      throw SampleError(record, what + " failed with a non-standard exception");
    }
  }

  // Part p's keys from end_key on hold no batch. Once every part has ended, the pass ends at the
  // last of those keys.
  void part_ended(Part& p, int64_t end_key) {
    p.done = true;
    std::lock_guard<std::mutex> lk(end_mu_);
    last_end_ = std::max(last_end_, end_key);
    if (++ended_ == plan_.parts_per_rank) end_.store(last_end_, std::memory_order_release);
  }

  const StreamPlan plan_;
  std::vector<std::unique_ptr<Part>> parts_;
  std::mutex end_mu_;
  int64_t ended_ = 0;
  int64_t last_end_ = 0;
  std::atomic<int64_t> end_{BatchMaker::kNoEnd};
};

}  // namespace

std::shared_ptr<BatchMaker> stream_batches(StreamPlan plan, int64_t first_key) {
  return std::make_shared<StreamBatches>(std::move(plan), first_key);
}

bool every_rank_has_batch(Communicator& comm, bool have, int64_t epoch, int64_t handed, bool drop_last) {
  at::Tensor mine = at::empty({1}, at::kByte);
  mine.fill_(have ? 1 : 0);
  const at::Tensor all = comm.allgather(mine).contiguous();
  const auto* flags = all.data_ptr<uint8_t>();
  std::string with, without;  // rank lists, "0,2"
  for (int r = 0; r < comm.size(); ++r) {
    std::string& list = flags[r] ? with : without;
    list += (list.empty() ? "" : ",") + std::to_string(r);
  }
  if (without.empty()) return true;
  if (with.empty()) return false;
  const std::string what = "streaming loader, epoch " + std::to_string(epoch) + ": after " + std::to_string(handed) +
                           " batches, rank(s) " + without + " have no batch left while rank(s) " + with + " still have";
  if (drop_last) {
    if (comm.rank() == 0)
      std::fprintf(stderr, "[xlaunch rank 0] %s; drop_last is set, so the pass ends here on every rank and the "
                   "records left on rank(s) %s are not read in this epoch\n", what.c_str(), with.c_str());
    return false;
  }
  throw UsageError(what + ". A data-parallel step needs a batch on every rank (the others would wait for them in the "
                   "gradient allreduce): give every rank the same number of records (balanced parts), or set the "
                   "loader's drop_last to end the pass on every rank when the first one runs out");
}

}  // namespace detail
}  // namespace xlaunch
