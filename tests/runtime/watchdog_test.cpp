// The watchdog's verdicts from literal boards, and the boards' files: created fresh, never through
// a link, never read when someone else's.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>

#include "watch/board.h"
#include "watch/verdict.h"
#include "xlaunch/error.h"
#include "scratch_dir.h"

using namespace xlaunch::watch;

namespace {

constexpr int64_t kS = 1000000000;
constexpr int64_t kNow = 1000 * kS;

struct Boards {
  std::vector<std::unique_ptr<Board>> owned;
  std::vector<const Board*> view;
  explicit Boards(int world) {
    for (int r = 0; r < world; ++r) {
      owned.push_back(std::make_unique<Board>());
      owned.back()->rank = r;
      for (auto& rec : owned.back()->ring) rec.seq.store(~uint64_t{0});
      view.push_back(owned.back().get());
    }
  }
  // Rank r issues collective `seq` at time t (seconds), finished `done` seconds later (0: open).
  CollectiveRecord& log(int r, uint64_t seq, const char* op, int64_t numel, int bucket, int64_t t, int64_t done) {
    Board& b = *owned[r];
    CollectiveRecord& rec = b.slot(seq);
    rec.seq = seq;
    std::strcpy(rec.op, op);
    std::strcpy(rec.dtype, "float32");
    rec.numel = numel;
    rec.elem_bytes = 4;
    rec.bucket = bucket;
    rec.issued_ns = t * kS;
    rec.start_ns = t * kS;
    rec.end_ns = done ? (t + done) * kS : 0;
    rec.state = tagged(seq, done ? CollState::Done : CollState::Running);
    b.issued = std::max<uint64_t>(b.issued, seq + 1);
    return rec;
  }
};

// More collectives in flight than the ring holds (kRing), their completions seen late, as the NCCL
// poller sees them: a completion for a collective whose slot a newer one has taken must not mark
// the newer one done, or a hang in it would never get a verdict.
TEST(Board, ALateCompletionNeverClosesTheNewerCollectiveInItsSlot) {
  auto b = std::make_unique<Board>();
  for (auto& rec : b->ring) rec.seq.store(~uint64_t{0});
  const uint64_t n = 200;
  for (uint64_t seq = 0; seq < n; ++seq) {
    b->issued = seq + 1;
    b->log_issued(seq, "allreduce", "float32", 1024, 4, static_cast<int>(seq), 1);
    EXPECT_TRUE(b->log_started(seq, 2)) << seq;
  }
  // Every one but the newest completes, oldest first, after all were issued.
  for (uint64_t seq = 0; seq + 1 < n; ++seq)
    EXPECT_EQ(b->log_finished(seq, true, 3), seq >= n - kRing) << seq << " (the ring holds the last " << kRing << ")";
  const CollectiveRecord* open = oldest_open(*b);
  ASSERT_NE(open, nullptr) << "the stuck collective #" << n - 1 << " was marked done by an older one's completion";
  EXPECT_EQ(open->seq.load(), n - 1);
  EXPECT_EQ(open->state_of(n - 1), CollState::Running);
  EXPECT_EQ(open->bucket, static_cast<int>(n - 1));
  EXPECT_EQ(open->end_ns.load(), 0);
  // The ones the ring still holds are done, with their times.
  EXPECT_EQ(b->find(n - 2)->state_of(n - 2), CollState::Done);
  EXPECT_EQ(b->find(n - 2)->end_ns.load(), 3);
  EXPECT_EQ(b->find(n - 1 - kRing), nullptr);
}

TEST(Board, ALateStartNeverTouchesTheNewerCollectiveInItsSlot) {
  auto b = std::make_unique<Board>();
  for (auto& rec : b->ring) rec.seq.store(~uint64_t{0});
  for (uint64_t seq = 0; seq <= kRing; ++seq) {
    b->issued = seq + 1;
    b->log_issued(seq, "broadcast", "int64", 8, 8, -1, 1);
  }
  EXPECT_FALSE(b->log_started(0, 5));  // slot 0 holds #kRing now
  EXPECT_FALSE(b->log_finished(0, false, 6));
  const CollectiveRecord* open = oldest_open(*b);
  ASSERT_NE(open, nullptr);
  EXPECT_EQ(open->seq.load(), 1u);  // #0 is gone from the ring; #1 is the oldest it holds
  EXPECT_EQ(b->find(kRing)->state_of(kRing), CollState::Issued);
  EXPECT_EQ(b->find(kRing)->start_ns.load(), 0);
  EXPECT_TRUE(b->log_started(kRing, 7));
  EXPECT_TRUE(b->log_finished(kRing, false, 8));
  EXPECT_EQ(b->find(kRing)->state_of(kRing), CollState::Failed);
  EXPECT_FALSE(b->log_finished(kRing, true, 9));  // once finished, it stays as it finished
}

TEST(Verdict, StuckNamesTheCollectiveWhoEnteredAndWhoNeverDid) {
  Boards b(4);
  for (int r : {0, 1, 2, 3}) b.log(r, 456, "allreduce", 262144, 1, 398, 1);
  CollectiveRecord* open = nullptr;
  for (int r : {0, 2, 3}) open = &b.log(r, 457, "allreduce", 262144, 2, 400, 0);
  b.owned[1]->step = 112;
  const Verdict v = stuck_verdict(*open, b.view, 600 * kS, kNow);
  EXPECT_EQ(v.exit_code, 124);
  EXPECT_EQ(v.rank, 1);
  EXPECT_EQ(v.message,
            "job stuck: allreduce #457 (bucket 2, 1.0 MiB float32) waited 600 s: ranks 0,2,3 entered, rank 1 never did "
            "(its last: allreduce #456 at step 112, 601 s ago)");
}

TEST(Verdict, StuckWithEveryRankInsideAndRanksNotVisible) {
  Boards b(3);
  const CollectiveRecord& open = b.log(0, 0, "barrier", 0, -1, 990, 0);
  b.log(1, 0, "barrier", 0, -1, 990, 0);
  std::vector<const Board*> all = {b.view[0], b.view[1], b.view[2]};
  b.log(2, 0, "barrier", 0, -1, 990, 0);
  EXPECT_EQ(stuck_verdict(open, all, 10 * kS, kNow).message,
            "job stuck: barrier #0 (0 B float32) waited 10 s: every rank entered it and none finished it");
  all[2] = nullptr;
  EXPECT_EQ(stuck_verdict(open, all, 10 * kS, kNow).message,
            "job stuck: barrier #0 (0 B float32) waited 10 s: ranks 0,1 entered it and none finished it; rank 2: no "
            "progress board visible from this machine (other machines need a shared log_dir)");
}

// Uneven inputs: a joined rank (data ended, shadowing the others' steps) is never the one blamed,
// and when it waits in another collective of that number, the verdict says what to move.
TEST(Verdict, AJoinedRankIsNotBlamedAndAForeignCollectiveIsNamed) {
  Boards b(3);
  const CollectiveRecord& open = b.log(0, 40, "allreduce", 4, -1, 990, 0);  // rank 0: acc.reduce of a loss
  b.log(2, 40, "allreduce", 262144, 0, 990, 0);                             // rank 2: a gradient bucket
  b.log(1, 39, "allreduce", 4, -1, 989, 1);
  b.owned[2]->joined = 1;
  b.owned[1]->step = 7;
  const Verdict v = stuck_verdict(open, b.view, 10 * kS, kNow);
  EXPECT_EQ(v.rank, 1);
  EXPECT_EQ(v.message,
            "job stuck: allreduce #40 (16 B float32) waited 10 s: rank 0 entered, rank 1 never did (its last: allreduce "
            "#39 at step 7, 10 s ago); rank 2 joined (data ended; taking part in the others' steps with nothing of its "
            "own), and rank 2 is in allreduce #40 (bucket 0, 1.0 MiB float32) instead: with uneven inputs a training "
            "step may issue no collective besides the Accelerator's own (acc.gather, acc.reduce, wait_for_everyone): "
            "move those after the epoch (docs/data-loading.md#uneven-inputs)");
}

// A desync: the ranks are in different collectives of one number (rank 0 in acc.reduce's allreduce
// where the others are in acc.gather's allgather): the rank on the other path is the one at fault.
TEST(Verdict, StuckInADesyncNamesTheRankOnTheOtherPath) {
  Boards b(3);
  const CollectiveRecord& open = b.log(0, 41, "allreduce", 4, -1, 990, 0);
  b.log(1, 41, "allgather", 12, -1, 990, 0);
  b.log(2, 41, "allgather", 12, -1, 990, 0);
  const Verdict v = stuck_verdict(open, b.view, 10 * kS, kNow);
  EXPECT_EQ(v.rank, 0);
  EXPECT_EQ(v.message,
            "job stuck: allreduce #41 (16 B float32) waited 10 s: rank 0 is in allreduce #41 while ranks 1, 2 are in "
            "allgather #41: the training loop took another path on rank 0");
}

TEST(Verdict, StuckWithEveryRankInsideOnSeveralMachinesPointsAtTheNetwork) {
  Boards b(2);
  std::strcpy(b.owned[0]->host, "sim0");
  std::strcpy(b.owned[1]->host, "sim1");
  const CollectiveRecord& open = b.log(0, 259, "allreduce", 19200, 0, 990, 0);
  b.log(1, 259, "allreduce", 19200, 0, 990, 0);
  EXPECT_EQ(stuck_verdict(open, b.view, 10 * kS, kNow).message,
            "job stuck: allreduce #259 (bucket 0, 75.0 KiB float32) waited 10 s: every rank entered it and none "
            "finished it (on 2 machines: this points at the network between the machines, not at a rank)");
  std::strcpy(b.owned[1]->host, "sim0");  // one machine: no such hint
  EXPECT_EQ(stuck_verdict(open, b.view, 10 * kS, kNow).message.find("network"), std::string::npos);
}

TEST(Verdict, ARankThatLeftIsNamedWithItsCode) {
  Boards b(2);
  b.log(1, 56, "allreduce", 3200, 0, 995, 1);
  b.owned[1]->step = 20;
  b.owned[1]->exit_status = 0;
  const CollectiveRecord& open = b.log(0, 57, "allreduce", 3200, 0, 999, 0);
  Verdict v = left_verdict(0, open, 1, *b.view[1], kNow);
  EXPECT_EQ(v.exit_code, 1);
  EXPECT_EQ(v.rank, 1);
  EXPECT_EQ(v.message,
            "rank 1 finished (exit code 0) and left the job while rank 0 waited for it in allreduce #57 (bucket 0, 12.5 "
            "KiB float32) (its last: allreduce #56 at step 20, 4 s ago); every rank must issue the same collectives: a "
            "rank that stops early must stop all of them");
  b.owned[1]->exit_status = 3;
  v = left_verdict(0, open, 1, *b.view[1], kNow);
  EXPECT_EQ(v.exit_code, 3);
  EXPECT_NE(v.message.find("rank 1 failed (exit code 3) and left the job"), std::string::npos) << v.message;
}

TEST(Verdict, MismatchNamesBothSidesAndTheRankThatDiffersFromRankZero) {
  Boards b(3);
  const CollectiveRecord& r0 = b.log(0, 12, "allreduce", 1024, 0, 999, 0);
  CollectiveRecord& r1 = b.log(1, 12, "broadcast", 10, -1, 999, 0);
  std::strcpy(r1.dtype, "int64");
  EXPECT_TRUE(same_collective(r0, b.log(2, 12, "allreduce", 1024, 0, 999, 0)));
  EXPECT_FALSE(same_collective(r0, r1));
  const std::string text =
      "collective mismatch at #12: rank 0 is in allreduce #12 of [1024] float32, rank 1 in broadcast #12 of [10] int64; "
      "every rank must issue the same collectives in the same order";
  EXPECT_EQ(mismatch_verdict(0, r0, 1, r1).message, text);
  EXPECT_EQ(mismatch_verdict(1, r1, 0, r0).message, text);
  EXPECT_EQ(mismatch_verdict(0, r0, 1, r1).rank, 1);
  EXPECT_EQ(mismatch_verdict(1, r1, 0, r0).rank, 1);
  EXPECT_EQ(mismatch_verdict(2, r0, 1, r1).rank, 1);  // rank 2 agrees with rank 0, so rank 1 differs
}

class BoardFiles : public xlaunch::test::ScratchDirTest<> {};

TEST_F(BoardFiles, CreatedFreshPrivateAndReadableByPeers) {
  Board* mine = create_board(dir_, 0, 2);
  mine->issued = 7;
  struct stat st {};
  ASSERT_EQ(stat(board_path(dir_, 0).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const Board* seen = open_peer_board(dir_, 0);
  ASSERT_NE(seen, nullptr);
  EXPECT_EQ(seen->issued.load(), 7u);
  EXPECT_EQ(open_peer_board(dir_, 1), nullptr);  // not there yet
  EXPECT_THROW(create_board(dir_, 0, 2), xlaunch::CommError);  // an existing file is never reused
}

TEST_F(BoardFiles, NeverWritesThroughALinkNorReadsOne) {
  const std::string victim = dir_ + "/victim";
  std::ofstream(victim) << "keep me\n";
  ASSERT_EQ(symlink(victim.c_str(), board_path(dir_, 1).c_str()), 0);
  EXPECT_THROW(create_board(dir_, 1, 2), xlaunch::CommError);
  EXPECT_EQ(open_peer_board(dir_, 1), nullptr);
  std::ifstream in(victim);
  std::string text;
  std::getline(in, text);
  EXPECT_EQ(text, "keep me");
}

}  // namespace
