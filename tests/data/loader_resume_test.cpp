// Resuming an epoch part-way on another layout (world size x batch size) through LoaderPosition,
// and the epoch-end callback. Ranks are loaders built with each rank's place, read in turn.
#include <gtest/gtest.h>

#include <ATen/ops/stack.h>

#include <map>
#include <stdexcept>
#include <thread>

#include "test_datasets.h"
#include "xlaunch/loader.h"
#include "xlaunch/metrics.h"

namespace {

using namespace xlaunch::test;
using xlaunch::Batch;
using xlaunch::Loader;
using xlaunch::LoaderPosition;

// One loader per rank of a world; every rank's batches of one epoch.
struct World {
  std::vector<Loader> ranks;
  World(int64_t n, int64_t b, int world, bool drop_last = false) {
    for (int r = 0; r < world; ++r) {
      auto o = options(b, 2, r, world);
      o.drop_last = drop_last;
      ranks.emplace_back(IndexDataset(n), o);
    }
  }
  void set_position(const LoaderPosition& p) {
    for (auto& l : ranks) l.set_position(p);
  }
  // Reads up to `batches` batches of the next epoch on every rank (all: -1); returns them per
  // rank, and the position of every rank afterwards (they must agree).
  std::vector<std::vector<Batch>> read(int64_t batches, LoaderPosition* after = nullptr) {
    std::vector<std::vector<Batch>> out;
    std::vector<LoaderPosition> positions;
    for (auto& l : ranks) {
      out.emplace_back();
      for (auto& b : l) {
        out.back().push_back(b);
        if (static_cast<int64_t>(out.back().size()) == batches) break;
      }
      positions.push_back(l.position());
    }
    for (const auto& p : positions) {
      EXPECT_EQ(p.epoch, positions[0].epoch);
      EXPECT_EQ(p.batch, positions[0].batch);
      EXPECT_EQ(p.consumed, positions[0].consumed);
    }
    if (after) *after = positions[0];
    return out;
  }
};

// Batch k of every rank, gathered as gather_for_metrics would (stacked in rank order) with the
// padding dropped: the targets in the epoch's global order.
std::vector<int64_t> gathered_targets(const std::vector<std::vector<Batch>>& per_rank) {
  std::vector<int64_t> out;
  for (size_t k = 0; k < per_rank[0].size(); ++k) {
    std::vector<at::Tensor> rows;
    for (const auto& rank : per_rank) rows.push_back(rank.at(k).target);
    const at::Tensor kept = xlaunch::drop_padding(at::stack(rows), per_rank[0][k].span);
    for (int64_t i = 0; i < kept.size(0); ++i) out.push_back(kept[i].item<int64_t>());
  }
  return out;
}

std::map<int64_t, int> counts(const std::vector<std::vector<Batch>>& per_rank, std::map<int64_t, int> c = {}) {
  for (const auto& rank : per_rank)
    for (const auto& b : rank)
      for (int64_t i = 0; i < b.size(); ++i) ++c[b.target[i].item<int64_t>()];
  return c;
}

// The epoch's global order: one process reading it whole.
std::vector<int64_t> global_order(int64_t n, int64_t epoch) {
  return xlaunch::shard_indices(xlaunch::SamplerOptions{n, 0, 1, 3, true, false}, epoch);
}

TEST(LoaderResume, FourRanksStoppedThenThreeThenTwoReadEverySampleOnce) {
  const int64_t n = 50;
  World four(n, 3, 4);
  four.read(-1);  // epoch 0
  LoaderPosition p;
  const auto first = four.read(2, &p);  // 2 batches of epoch 1: positions [0, 24)
  EXPECT_EQ(p.epoch, 1);
  EXPECT_EQ(p.batch, 2);
  EXPECT_EQ(p.consumed, 24);

  World three(n, 5, 3);  // 26 remain: shards of 9 (one padded), batches 5 + 4
  three.set_position(p);
  EXPECT_EQ(three.ranks[0].position().consumed, 24);
  EXPECT_EQ(three.ranks[0].position().batch, 0) << "24 is not a multiple of this layout's 15";
  LoaderPosition q;
  const auto second = three.read(1, &q);
  EXPECT_EQ(q.epoch, 1);
  EXPECT_EQ(q.batch, 1);
  EXPECT_EQ(q.consumed, 24 + 15);
  EXPECT_EQ(second[0][0].index, 0);
  EXPECT_EQ(second[0][0].span.offset, 24);

  World two(n, 4, 2);  // 11 remain: shards of 6 (one padded), batches 4 + 2
  two.set_position(q);
  const auto third = two.read(-1);
  ASSERT_EQ(third[0].size(), 2u);
  EXPECT_EQ(third[0][1].size(), 2);
  EXPECT_EQ(two.ranks[0].position().epoch, 2);
  EXPECT_EQ(two.ranks[0].position().consumed, 0);

  // Together: every sample of epoch 1 once, and one more: the padding at the very end.
  std::map<int64_t, int> c = counts(third, counts(second, counts(first)));
  ASSERT_EQ(static_cast<int64_t>(c.size()), n);
  const std::vector<int64_t> order = global_order(n, 1);
  for (const auto& [i, k] : c) EXPECT_EQ(k, i == order[0] ? 2 : 1) << "sample " << i;
  // gather_for_metrics drops exactly the padding: the three jobs' gathers are the epoch's order.
  std::vector<int64_t> gathered = gathered_targets(first);
  for (const auto& part : {second, third}) {
    const auto g = gathered_targets(part);
    gathered.insert(gathered.end(), g.begin(), g.end());
  }
  EXPECT_EQ(gathered, order);

  // The next epoch is whole again, on the new layout.
  const auto epoch2 = two.read(-1);
  EXPECT_EQ(gathered_targets(epoch2), global_order(n, 2));
  EXPECT_EQ(epoch2[0][0].span.offset, 0);
}

TEST(LoaderResume, DropLastCutsTheRemainingTailOnly) {
  const int64_t n = 50;
  World four(n, 3, 4, true);
  LoaderPosition p;
  const auto first = four.read(2, &p);
  EXPECT_EQ(p.consumed, 24);
  World three(n, 4, 3, true);  // 26 remain: 8 per rank (2 cut), batches of 4
  three.set_position(p);
  const auto rest = three.read(-1);
  ASSERT_EQ(rest[0].size(), 2u);
  std::vector<int64_t> gathered = gathered_targets(first);
  const auto g = gathered_targets(rest);
  gathered.insert(gathered.end(), g.begin(), g.end());
  const std::vector<int64_t> order = global_order(n, 0);
  EXPECT_EQ(gathered, std::vector<int64_t>(order.begin(), order.begin() + 48));
  const std::map<int64_t, int> c = counts(rest, counts(first));
  EXPECT_EQ(c.size(), 48u);
  for (const auto& [i, k] : c) EXPECT_EQ(k, 1) << "sample " << i;
}

// A position on a batch boundary of this layout (the same world and batch size, or the same
// global batch) is the plain epoch with batches skipped: indices, spans and contents identical.
TEST(LoaderResume, ABoundaryOfThisLayoutIsTheSkipPath) {
  for (const auto& [b, world] : std::vector<std::pair<int64_t, int>>{{4, 2}, {8, 1}}) {
    SCOPED_TRACE("resumed as " + std::to_string(world) + " x " + std::to_string(b));
    World saved(37, 4, 2);
    LoaderPosition p;
    saved.read(3, &p);
    EXPECT_EQ(p.consumed, 24);
    World resumed(37, b, world), skipped(37, b, world);
    resumed.set_position(p);
    EXPECT_EQ(resumed.ranks[0].position().batch, 24 / (b * world));
    for (auto& l : skipped.ranks) l.skip_first_batches(24 / (b * world));
    const auto got = resumed.read(-1), want = skipped.read(-1);
    for (int r = 0; r < world; ++r) {
      ASSERT_EQ(got[r].size(), want[r].size());
      for (size_t k = 0; k < got[r].size(); ++k) {
        EXPECT_EQ(got[r][k].index, want[r][k].index);
        EXPECT_EQ(got[r][k].span.first_position, want[r][k].span.first_position);
        EXPECT_EQ(got[r][k].span.offset, 0);
        EXPECT_TRUE(got[r][k].target.equal(want[r][k].target));
      }
    }
  }
}

TEST(LoaderResume, PositionBeforeBeginIsWhatWasSet) {
  Loader l(IndexDataset(50), options(5, 0, 1, 2));
  l.set_position(LoaderPosition{3, 0, 17});
  EXPECT_EQ(l.position().epoch, 3);
  EXPECT_EQ(l.position().consumed, 17);
  l.set_position(LoaderPosition{2, 0, 20});  // a boundary: 2 batches of 2 x 5
  EXPECT_EQ(l.position().batch, 2);
  EXPECT_EQ(l.position().consumed, 20);
  l.set_position(LoaderPosition{1, 3, 0});  // batches, written by hand
  EXPECT_EQ(l.position().batch, 3);
  EXPECT_EQ(l.position().consumed, 30);
  EXPECT_THROW(l.set_position(LoaderPosition{1, 0, 51}), xlaunch::UsageError);
  EXPECT_THROW(l.set_position(LoaderPosition{1, -1, 0}), xlaunch::UsageError);
  EXPECT_THROW(l.set_position(LoaderPosition{-1, 0, 0}), xlaunch::UsageError);
}

TEST(LoaderEpochEnd, CalledOnTheTrainingThreadAfterTheLastBatchWithTheNextPosition) {
  Loader l(IndexDataset(20), options(6, 2));  // 4 batches
  std::vector<int64_t> ended;
  std::vector<LoaderPosition> at;
  const std::thread::id me = std::this_thread::get_id();
  l.set_epoch_end_callback([&](int64_t epoch) {
    EXPECT_EQ(std::this_thread::get_id(), me);
    ended.push_back(epoch);
    at.push_back(l.position());
  });
  int64_t batches = 0;
  for (auto& b : l) {
    (void)b;
    ++batches;
    EXPECT_TRUE(ended.empty()) << "called before the epoch's end";
  }
  EXPECT_EQ(batches, 4);
  ASSERT_EQ(ended, std::vector<int64_t>{0});
  EXPECT_EQ(at[0].epoch, 1);
  EXPECT_EQ(at[0].batch, 0);
  EXPECT_EQ(at[0].consumed, 0);

  for (auto& b : l) {  // left early: not called
    (void)b;
    break;
  }
  EXPECT_EQ(ended.size(), 1u);
  run_epoch(l);  // epoch 2 whole
  EXPECT_EQ(ended, (std::vector<int64_t>{0, 2}));

  l.skip_first_batches(10);  // nothing left of epoch 3: ends in begin()
  EXPECT_TRUE(l.begin() == l.end());
  EXPECT_EQ(ended, (std::vector<int64_t>{0, 2, 3}));

  l.set_epoch_end_callback([](int64_t) { throw std::runtime_error("save failed"); });
  EXPECT_THROW(run_epoch(l), std::runtime_error);
  EXPECT_EQ(l.position().epoch, 5);
  l.set_epoch_end_callback({});
  run_epoch(l);
  EXPECT_EQ(ended.size(), 3u);
}

TEST(LoaderEpochEnd, NotCalledWhenLoadingFails) {
  Loader failing(IndexDataset(20, /*fail_at=*/7), options(6, 1));
  int calls = 0;
  failing.set_epoch_end_callback([&](int64_t) { ++calls; });
  EXPECT_THROW(run_epoch(failing), xlaunch::SampleError);
  EXPECT_EQ(calls, 0);
}

}  // namespace

TEST(LoaderNextBatch, CalledAfterEachHandedBatchWithItCountedAndBeforeTheEpochEnd) {
  Loader l(IndexDataset(20), options(6, 2));  // 4 batches
  std::vector<std::string> events;
  l.set_next_batch_callback([&] {
    const auto pos = l.position();
    events.push_back("next@" + std::to_string(pos.epoch) + "." + std::to_string(pos.batch));
  });
  l.set_epoch_end_callback([&](int64_t epoch) { events.push_back("end" + std::to_string(epoch)); });
  for (auto& b : l) events.push_back("body" + std::to_string(b.index));
  // After the epoch's last batch the position already names the next epoch's start.
  EXPECT_EQ(events, (std::vector<std::string>{"body0", "next@0.1", "body1", "next@0.2", "body2", "next@0.3", "body3",
                                              "next@1.0", "end0"}));
  events.clear();
  for (auto& b : l) {  // left after the first body: nothing runs for the next batch
    events.push_back("body" + std::to_string(b.index));
    break;
  }
  EXPECT_EQ(events, (std::vector<std::string>{"body0"}));
}
