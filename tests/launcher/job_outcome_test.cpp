// How `xlaunch run` reports a job that its ranks' watchdog ended: the verdict file the ranks write,
// and the outcome it decides (exit code, the rank at fault, the message).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <fstream>

#include "rank_status.h"

using namespace xlaunch::launcher;

namespace {

int exited(int code) { return code << 8; }  // a waitpid status for exit(code)

class VerdictFile : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/xlaunch_verdict_test.XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  void TearDown() override { std::system(("rm -rf '" + dir_ + "'").c_str()); }
  std::string dir_;
};

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
  const JobVerdict v{124, 1, "job stuck: allreduce #5 (4 B float32) waited 10 s: rank 0 entered, rank 1 never did"};
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

}  // namespace
