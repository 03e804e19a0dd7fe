// Streaming datasets through the Loader in one process: the dealing of parts to batches (literal),
// every record once per pass on 3 ranks x 2 workers, an exact resume mid-pass, the same batches
// whatever num_workers is, the ranks' agreement on the pass's end, and the errors.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <thread>

#include "../runtime/inprocess_ranks.h"
#include "stream_datasets.h"

namespace {

using xlaunch::Loader;
using xlaunch::LoaderPosition;
using xlaunch::test::batch_targets;
using xlaunch::test::Records;
using xlaunch::test::stream_options;
using Batches = std::vector<std::vector<int64_t>>;

constexpr int64_t kRecords = 10007;
constexpr int kRanks = 3;

// Every record of 0..n-1 exactly once over the ranks' batches; "" when so, else what is wrong.
std::string once_each(const std::vector<Batches>& per_rank, int64_t n) {
  std::map<int64_t, int> seen;
  for (const auto& batches : per_rank)
    for (const auto& b : batches)
      for (const int64_t id : b) ++seen[id];
  for (int64_t i = 0; i < n; ++i)
    if (seen[i] != 1) return "record " + std::to_string(i) + " seen " + std::to_string(seen[i]) + " times";
  if (static_cast<int64_t>(seen.size()) != n) return std::to_string(seen.size() - n) + " records outside 0..n-1";
  return "";
}

TEST(StreamLoader, DealsPartsInTurnPassingOverEndedOnes) {
  // One rank, 3 parts of 5, 1 and 3 records (part p: records p, p+3, ...), batch 2: part 1's only
  // batch is short and ends it; then parts 0 and 2 alternate until each ends.
  Loader loader(std::make_shared<Records>(100, -1, std::vector<int64_t>{5, 1, 3}), stream_options(2, 2, 3));
  const Batches expected{{0, 3}, {1}, {2, 5}, {6, 9}, {8}, {12}};
  EXPECT_EQ(batch_targets(loader), expected);
  // The batches are numbered in hand-over order, and the pass ends with a position at the next epoch.
  const LoaderPosition pos = loader.position();
  EXPECT_EQ(pos.epoch, 1);
  EXPECT_EQ(pos.batch, 0);
  EXPECT_EQ(pos.part_records, (std::vector<int64_t>{0, 0, 0}));
}

TEST(StreamLoader, PartsOfRanksInterleave) {
  // 2 ranks x 2 parts: rank r reads parts r and r + 2; record i belongs to part i % 4.
  Loader r0(std::make_shared<Records>(12), stream_options(2, 1, 2, 0, 2));
  Loader r1(std::make_shared<Records>(12), stream_options(2, 1, 2, 1, 2));
  EXPECT_EQ(batch_targets(r0), (Batches{{0, 4}, {2, 6}, {8}, {10}}));
  EXPECT_EQ(batch_targets(r1), (Batches{{1, 5}, {3, 7}, {9}, {11}}));
}

std::vector<Loader> rank_loaders(const std::shared_ptr<Records>& ds, int64_t batch, int workers) {
  std::vector<Loader> out;
  for (int r = 0; r < kRanks; ++r) out.emplace_back(ds, stream_options(batch, workers, 2, r, kRanks));
  return out;
}

TEST(StreamLoader, EveryRecordOncePerPassOnThreeRanksTwoWorkers) {
  auto ds = std::make_shared<Records>(kRecords);
  auto loaders = rank_loaders(ds, 16, 2);
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    SCOPED_TRACE("epoch " + std::to_string(epoch));
    std::vector<Batches> seen;
    for (auto& l : loaders) {
      EXPECT_EQ(l.epoch(), epoch);
      seen.push_back(batch_targets(l));
    }
    EXPECT_EQ(once_each(seen, kRecords), "");
  }
  EXPECT_EQ(ds->opened.load(), 2 * kRanks * 2);  // each part opened once per pass
}

TEST(StreamLoader, ResumeMidPassIsTheUninterruptedRun) {
  auto ds = std::make_shared<Records>(kRecords);
  for (const int64_t stop : {0, 1, 37, 150}) {  // batches handed over before the save, per rank
    SCOPED_TRACE("stopped after " + std::to_string(stop));
    auto whole = rank_loaders(ds, 16, 2), first = rank_loaders(ds, 16, 2), second = rank_loaders(ds, 16, 1);
    std::vector<Batches> before, after;
    for (int r = 0; r < kRanks; ++r) {
      whole[r].set_epoch(1);
      const Batches all = batch_targets(whole[r]);
      first[r].set_epoch(1);
      before.push_back(stop > 0 ? batch_targets(first[r], stop) : Batches{});
      const LoaderPosition pos = first[r].position();
      EXPECT_EQ(pos.epoch, 1);
      EXPECT_EQ(pos.batch, stop);
      second[r].set_position(pos);  // another worker count: the same batches
      after.push_back(batch_targets(second[r]));
      Batches joined = before.back();
      joined.insert(joined.end(), after.back().begin(), after.back().end());
      EXPECT_EQ(joined, all) << "rank " << r;
      EXPECT_EQ(second[r].epoch(), 2);
    }
    std::vector<Batches> both = before;
    both.insert(both.end(), after.begin(), after.end());
    EXPECT_EQ(once_each(both, kRecords), "");
  }
}

TEST(StreamLoader, SameBatchesWhateverNumWorkers) {
  auto ds = std::make_shared<Records>(1001, -1, std::vector<int64_t>{90, 7, 300, 0, 41, 150});
  Loader reference(ds, stream_options(8, 0, 3, 1, 2));
  const Batches expected = batch_targets(reference);
  EXPECT_EQ(expected.size(), 1u + 0u + 19u);  // parts 1, 3 and 5: 7, 0 and 150 records
  for (const int workers : {1, 2, 3, 7, xlaunch::kAutoWorkers}) {
    Loader loader(ds, stream_options(8, workers, 3, 1, 2));
    EXPECT_EQ(batch_targets(loader), expected) << workers << " workers";
  }
}

TEST(StreamLoader, PrefetchIsBoundedAndThePositionCountsOnlyWhatWasHandedOver) {
  // 1 worker, prefetch 2: with the training loop holding batch 0, at most batches 1 and 2 are read
  // ahead (whatever the timing: the bound holds at any moment).
  auto ds = std::make_shared<Records>(1000);
  auto o = stream_options(10, 1, 1);
  o.prefetch_factor = 2;
  Loader loader(ds, o);
  auto it = loader.begin();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // give the worker time to overrun, if it could
  EXPECT_LE(ds->read.load(), 30);
  EXPECT_EQ(it->index, 0);
  EXPECT_EQ(loader.position().consumed, 10);
  EXPECT_EQ(loader.position().part_records, std::vector<int64_t>{10});
}

// ---- the ranks' agreement on the end of a pass ---------------------------------------------

// 3 ranks as threads, each with its own loader over parts of the given lengths (2 per rank).
std::vector<int64_t> handed_per_rank(const std::vector<int64_t>& lengths, bool drop_last, std::string* error) {
  auto ds = std::make_shared<Records>(100000, -1, lengths);
  std::vector<int64_t> handed(kRanks, 0);
  std::vector<std::string> errors(kRanks);
  xlaunch::test::run_ranks(kRanks, [&](std::shared_ptr<xlaunch::InProcessCommunicator> comm) {
    const int r = comm->rank();
    auto o = stream_options(4, 2, 2, r, kRanks);
    o.drop_last = drop_last;
    Loader loader(ds, o);
    loader.set_stream_agreement(comm);
    try {
      for (auto it = loader.begin(); it != loader.end(); ++it) ++handed[r];
    } catch (const xlaunch::UsageError& e) {
      errors[r] = e.what();
    }
  });
  for (int r = 1; r < kRanks; ++r) EXPECT_EQ(errors[r], errors[0]) << "every rank has the same error";
  *error = errors[0];
  return handed;
}

TEST(StreamLoader, RanksEndingTogetherEndThePassTogether) {
  std::string error;
  // Parts 0..5; rank r reads parts r and r + 3: 2 + 2 batches of 4 each (rank 1's two short).
  EXPECT_EQ(handed_per_rank({8, 5, 8, 8, 7, 8}, false, &error), (std::vector<int64_t>{4, 4, 4}));
  EXPECT_EQ(error, "");
}

TEST(StreamLoader, ARankEndingFirstIsAClearErrorOnEveryRank) {
  std::string error;
  // Rank 1 (parts 1 and 4) has 3 batches, the others 4.
  handed_per_rank({8, 4, 8, 8, 8, 8}, false, &error);
  EXPECT_NE(error.find("after 3 batches, rank(s) 1 have no batch left while rank(s) 0,2 still have"), std::string::npos)
      << error;
  EXPECT_NE(error.find("drop_last"), std::string::npos) << error;
}

TEST(StreamLoader, DropLastEndsThePassWhenTheFirstRankRunsOut) {
  std::string error;
  EXPECT_EQ(handed_per_rank({8, 4, 8, 8, 8, 8}, true, &error), (std::vector<int64_t>{3, 3, 3}));
  EXPECT_EQ(error, "");
}

// ---- errors ----------------------------------------------------------------------------------

TEST(StreamLoaderErrors, ARecordThatThrowsIsNamedWithItsPart) {
  // Record 5003 is record 833 of part 5 of 6 (5003 = 833 * 6 + 5), on rank 2 (parts 2 and 5).
  for (const int workers : {0, 2}) {
    Loader loader(std::make_shared<Records>(kRecords, 5003), stream_options(16, workers, 2, 2, kRanks));
    int64_t handed = 0;
    try {
      for (auto& b : loader) handed += b.size();
      FAIL() << "no error";
    } catch (const xlaunch::SampleError& e) {
      EXPECT_EQ(e.index(), 833);
      const std::string what = e.what();
      EXPECT_NE(what.find("reading record 833 of stream part 5 of 6 (epoch 0, rank 2) failed: record 5003 is bad on "
                          "purpose"),
                std::string::npos)
          << what;
    }
    // The batches before the bad one's were handed over in order: part 5's first 52 batches of
    // 16 and part 2's first 53 (the turn of part 5 comes second).
    EXPECT_EQ(handed, (53 + 52) * 16) << workers << " workers";
  }
}

struct Failing : xlaunch::StreamDataset {
  enum Mode { kOpenThrows, kNoReader } mode;
  explicit Failing(Mode m) : mode(m) {}
  std::unique_ptr<xlaunch::StreamReader> open(xlaunch::StreamPart part, int64_t) const override {
    if (mode == kOpenThrows && part.index == 1) throw std::runtime_error("no such file: part-1.bin");
    if (mode == kNoReader) return nullptr;
    return Records(10).open(part, 0);
  }
};

TEST(StreamLoaderErrors, OpeningFailuresNameThePart) {
  Loader throws(std::make_shared<Failing>(Failing::kOpenThrows), stream_options(2, 2, 2));
  try {
    batch_targets(throws);
    FAIL() << "no error";
  } catch (const xlaunch::SampleError& e) {
    EXPECT_NE(std::string(e.what()).find("opening stream part 1 of 2 (epoch 0, rank 0) failed: no such file: part-1.bin"),
              std::string::npos)
        << e.what();
  }
  Loader null_reader(std::make_shared<Failing>(Failing::kNoReader), stream_options(2, 0, 1));
  try {
    batch_targets(null_reader);
    FAIL() << "no error";
  } catch (const xlaunch::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("returned no reader for stream part 0 of 1"), std::string::npos) << e.what();
  }
}

TEST(StreamLoaderErrors, BadSetupIsRefusedClearly) {
  auto ds = std::make_shared<Records>(10);
  try {
    Loader l(ds, stream_options(2, 1, 0));
    FAIL() << "no error";
  } catch (const xlaunch::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("parts_per_rank is 0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Loader(std::shared_ptr<const xlaunch::StreamDataset>(), stream_options(2, 1, 1)), xlaunch::UsageError);
  Loader l(ds, stream_options(2, 1, 2));
  EXPECT_THROW(l.skip_first_batches(1), xlaunch::UsageError);
  LoaderPosition pos;
  pos.part_records = {1, 2, 3};  // 3 parts, the loader has 2
  try {
    l.set_position(pos);
    FAIL() << "no error";
  } catch (const xlaunch::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("records of 3 parts per rank, this streaming loader reads 2"),
              std::string::npos)
        << e.what();
  }
  pos.part_records = {1, 2};
  pos.next_part = 2;
  EXPECT_THROW(l.set_position(pos), xlaunch::UsageError);
  EXPECT_EQ(l.num_batches(), -1);
  EXPECT_EQ(l.dataset_size(), -1);
}

TEST(StreamLoaderErrors, AResumePastAPartsEndSaysTheStreamChanged) {
  Loader l(std::make_shared<Records>(10), stream_options(2, 1, 2));
  LoaderPosition pos;
  pos.part_records = {3, 9};  // part 1 holds only 5 records (1, 3, 5, 7, 9)
  l.set_position(pos);
  try {
    batch_targets(l);
    FAIL() << "no error";
  } catch (const xlaunch::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("stream part 1 of 2 (epoch 0, rank 0) ended after 5 records while passing "
                                         "over the 9 handed over before the checkpoint"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
