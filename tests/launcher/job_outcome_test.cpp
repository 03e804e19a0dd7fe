// How `xlaunch run` reports a job that its ranks' watchdog ended: the verdict file the ranks write,
// and the outcome it decides (exit code, the rank at fault, the message).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <fstream>

#include "launch/job_outcome.h"
#include "xlaunch/status/rank_status.h"
#include "xlaunch/status/verdict_file.h"
#include "scratch_dir.h"

using namespace xlaunch::launcher;
using namespace xlaunch::status;

namespace {

int exited(int code) { return code << 8; }  // a waitpid status for exit(code)

class VerdictFile : public xlaunch::test::ScratchDirTest<> {};

TEST_F(VerdictFile, ReadsCodeRankAndMessage) {
  std::ofstream(dir_ + "/verdict") << "124 1\njob stuck: allreduce #457 (bucket 2, 1.0 MiB float32) waited 600 s\n";
  const auto v = read_verdict(dir_);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->exit_code, 124);
  EXPECT_EQ(v->rank, 1);
  EXPECT_EQ(v->message, "job stuck: allreduce #457 (bucket 2, 1.0 MiB float32) waited 600 s");
}

TEST_F(VerdictFile, NoneMalformedOrALinkIsNoVerdict) {
  EXPECT_FALSE(read_verdict(dir_));
  std::ofstream(dir_ + "/verdict") << "stuck\n";
  EXPECT_FALSE(read_verdict(dir_));
  unlink((dir_ + "/verdict").c_str());
  std::ofstream(dir_ + "/elsewhere") << "124 1\nplanted\n";
  ASSERT_EQ(symlink((dir_ + "/elsewhere").c_str(), (dir_ + "/verdict").c_str()), 0);
  EXPECT_FALSE(read_verdict(dir_));  // never read through a link someone put there
}

TEST(SummarizeJob, AVerdictDecidesCodeRankAndMessage) {
  // The stuck rank was ended by mpirun (SIGTERM) after rank 0's watchdog gave up with 124.
  const Verdict v{124, 1, "job stuck: allreduce #5 (4 B float32) waited 10 s: rank 0 entered, rank 1 never did"};
  const auto o = summarize_job(exited(124), {{0, false, 124, 10}, {1, true, SIGTERM, 20}}, 2, v);
  EXPECT_EQ(o.exit_code, 124);
  EXPECT_EQ(o.rank, 1);
  EXPECT_EQ(o.message, v.message);
}

TEST(SummarizeJob, WithoutAVerdictTheFirstFailedRankIsNamed) {
  const auto o = summarize_job(exited(1), {{0, true, SIGTERM, 20}, {1, false, 3, 10}}, 2);
  EXPECT_EQ(o.rank, 1);
  EXPECT_EQ(summarize_job(exited(0), {{0, false, 0, 1}, {1, false, 0, 2}}, 2).rank, -1);
}

TEST(SummarizeJob, EveryRankOfOneMachineFailingFirstNamesTheMachine) {
  // Machine sim1's ranks were killed; mpirun then ended sim0's.
  const auto o = summarize_job(exited(137),
                               {{0, true, SIGTERM, 30, "sim0"}, {1, true, SIGTERM, 31, "sim0"},
                                {2, true, SIGKILL, 10, "sim1"}, {3, true, SIGKILL, 11, "sim1"}},
                               4);
  EXPECT_EQ(o.exit_code, 128 + SIGKILL);
  EXPECT_EQ(o.rank, 2);
  EXPECT_EQ(o.message,
            "machine sim1 (ranks 2, 3): every rank was killed by signal 9 (SIGKILL); after that, rank 0 was killed by "
            "signal 15 (SIGTERM), rank 1 was killed by signal 15 (SIGTERM)");
}

TEST(SummarizeJob, AMachineWhoseRanksEndedDifferentlyListsEach) {
  const auto o = summarize_job(exited(3), {{0, true, SIGTERM, 30, "a"}, {1, false, 3, 10, "b"}, {2, true, SIGKILL, 11, "b"}}, 3);
  EXPECT_EQ(o.rank, 1);
  EXPECT_EQ(o.message,
            "machine b (ranks 1, 2): rank 1 exited with code 3, rank 2 was killed by signal 9 (SIGKILL); after that, "
            "rank 0 was killed by signal 15 (SIGTERM)");
}

TEST(SummarizeJob, OneRankOfAMachineOrAOneMachineJobNamesTheRank) {
  // One rank of sim1 failed first: a rank's failure, not its machine's.
  auto o = summarize_job(exited(3),
                         {{0, true, SIGTERM, 30, "sim0"}, {1, true, SIGTERM, 31, "sim0"}, {2, false, 3, 10, "sim1"},
                          {3, true, SIGTERM, 32, "sim1"}},
                         4);
  EXPECT_EQ(o.message.rfind("rank 2 exited with code 3; after that, rank 0", 0), 0u) << o.message;
  // Every rank of both machines failed alike, sim0's first: the ranks' doing, not sim0's.
  o = summarize_job(exited(1),
                    {{0, false, 1, 10, "sim0"}, {1, false, 1, 11, "sim0"}, {2, false, 1, 12, "sim1"},
                     {3, false, 1, 13, "sim1"}},
                    4);
  EXPECT_EQ(o.message.rfind("rank 0 exited with code 1; after that, rank 1", 0), 0u) << o.message;
  // Every rank on the only machine.
  o = summarize_job(exited(137), {{0, true, SIGKILL, 10, "a"}, {1, true, SIGKILL, 11, "a"}}, 2);
  EXPECT_EQ(o.message, "rank 0 was killed by signal 9 (SIGKILL); after that, rank 1 was killed by signal 9 (SIGKILL)");
  // Statuses without hosts (an older wrapper).
  o = summarize_job(exited(137), {{0, true, SIGKILL, 10}, {1, true, SIGKILL, 11}}, 2);
  EXPECT_EQ(o.rank, 0);
}

TEST(SummarizeJob, RanksWithoutAStatusWhileTheOthersWereStoppedGoFirst) {
  // sim1 lost with its Open MPI daemon: ranks 2 and 3 left nothing; mpirun stopped sim0's.
  const auto o = summarize_job(exited(1), {{0, true, SIGTERM, 30, "sim0"}, {1, true, SIGTERM, 31, "sim0"}}, 4);
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_EQ(o.rank, 2);
  EXPECT_EQ(o.message.rfind("ranks 2, 3 ended without an exit status", 0), 0u) << o.message;
  EXPECT_NE(o.message.find("; after that, rank 0 was killed by signal 15 (SIGTERM), rank 1"), std::string::npos);
  // A rank that failed by itself still decides, whoever is missing.
  EXPECT_EQ(summarize_job(exited(1), {{0, false, 3, 30, "sim0"}}, 2).rank, 0);
}

TEST(SummarizeJob, EveryRankSavingOnAPreemptionIsPreempted) {
  // Both ranks saved and exited 75; mpirun reports the first non-zero exit.
  auto o = summarize_job(exited(75), {{0, false, 75, 10}, {1, false, 75, 11}}, 2);
  EXPECT_TRUE(o.preempted);
  EXPECT_EQ(o.exit_code, 75);
  EXPECT_EQ(o.rank, -1);
  EXPECT_EQ(o.message, "every rank saved its checkpoint and stopped (exit code 75)");
  // Rank 0 exited 75 first; mpirun then stopped rank 1 (SIGTERM) after it had saved too.
  o = summarize_job(exited(75), {{0, false, 75, 10, "a"}, {1, true, SIGTERM, 12, "a"}}, 2);
  EXPECT_TRUE(o.preempted);
  EXPECT_EQ(o.exit_code, 75);
}

TEST(SummarizeJob, APreemptionThatNotEveryRankFollowedIsAFailure) {
  // Rank 1 did not handle SIGUSR1 and died of it: the job failed, named.
  auto o = summarize_job(exited(75), {{0, false, 75, 10}, {1, true, SIGUSR1, 5}}, 2);
  EXPECT_FALSE(o.preempted);
  EXPECT_EQ(o.exit_code, 128 + SIGUSR1);
  EXPECT_EQ(o.rank, 1);
  // One rank left no status: not known to have saved.
  o = summarize_job(exited(75), {{0, false, 75, 10}}, 2);
  EXPECT_FALSE(o.preempted);
  // Every rank stopped by SIGTERM, none saved: no preemption.
  o = summarize_job(exited(143), {{0, true, SIGTERM, 10}, {1, true, SIGTERM, 11}}, 2);
  EXPECT_FALSE(o.preempted);
  // A rank exited 0 while the other saved: not a preemption.
  o = summarize_job(exited(75), {{0, false, 75, 10}, {1, false, 0, 11}}, 2);
  EXPECT_FALSE(o.preempted);
  EXPECT_EQ(o.exit_code, 75);
  EXPECT_EQ(o.rank, 0);
  // A verdict (a rank stuck while saving) decides over exit codes of 75.
  o = summarize_job(exited(124), {{0, false, 75, 10}, {1, true, SIGTERM, 20}}, 2, Verdict{124, 1, "job stuck"});
  EXPECT_FALSE(o.preempted);
  EXPECT_EQ(o.exit_code, 124);
}

TEST_F(VerdictFile, RankStatusesCarryTheirHost) {
  ASSERT_EQ(chmod(dir_.c_str(), 0700), 0);
  std::string why;
  ASSERT_TRUE(write_rank_status(dir_, {1, true, SIGKILL, 7, "sim1"}, &why)) << why;
  ASSERT_TRUE(write_rank_status(dir_, {0, false, 0, 8}, &why)) << why;
  std::ofstream(dir_ + "/rank-2") << "2 0 3 9\n";  // written without a host
  const auto got = read_rank_statuses(dir_);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[1].host, "sim1");
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  EXPECT_EQ(got[0].host, host);  // this machine's, when the writer gave none
  EXPECT_EQ(got[2].host, "");
  EXPECT_EQ(got[2].code, 3);
}

}  // namespace
