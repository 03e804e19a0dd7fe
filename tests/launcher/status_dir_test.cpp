// The status directory's files through the status library alone, as both sides use it: what one
// side writes, the other reads back the same; the verdict is written once per job; a timeline part
// is taken (read and removed) once; the stats file is read only when it is the rank's.
#include <dirent.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "xlaunch/status/private_files.h"
#include "xlaunch/status/status_dir.h"
#include "xlaunch/status/step_stats.h"
#include "xlaunch/status/trace_part.h"
#include "xlaunch/status/verdict_file.h"
#include "scratch_dir.h"

namespace status = xlaunch::status;
namespace files = xlaunch::files;

namespace {

class StatusDir : public xlaunch::test::ScratchDirTest<> {};

}  // namespace

TEST_F(StatusDir, OneVerdictPerJob) {
  EXPECT_FALSE(status::read_verdict(dir_));
  ASSERT_TRUE(status::write_verdict(dir_, {124, 1, "job stuck: allreduce #5 (4 B float32) waited 10 s"}));
  EXPECT_FALSE(status::write_verdict(dir_, {1, 0, "a later verdict"})) << "the first one stands";
  const auto v = status::read_verdict(dir_);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->exit_code, 124);
  EXPECT_EQ(v->rank, 1);
  EXPECT_EQ(v->message, "job stuck: allreduce #5 (4 B float32) waited 10 s");
  struct stat st {};
  ASSERT_EQ(stat((dir_ + "/verdict").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(StatusDir, StatsWrittenByTheRankAreReadByTheLauncher) {
  std::string why;
  xlaunch::profile::RankStats* mine = status::create_stats_file(dir_, 3, &why);
  ASSERT_NE(mine, nullptr) << why;
  EXPECT_FALSE(status::read_stats_file(dir_, 3)) << "no magic yet: not stats";
  mine->magic = xlaunch::profile::kStatsMagic;
  mine->rank = 3;
  mine->total.steps = 42;
  mine->ring[41].samples = 32;
  const auto seen = status::read_stats_file(dir_, 3);
  ASSERT_TRUE(seen);
  EXPECT_EQ(seen->total.steps, 42u);
  EXPECT_EQ(seen->ring[41].samples, 32u);
  EXPECT_FALSE(status::read_stats_file(dir_, 2)) << "no file";
  EXPECT_EQ(status::create_stats_file(dir_, 3, &why), nullptr) << "an existing file is never reused";
}

TEST_F(StatusDir, ATracePartIsTakenOnceWithItsSpans) {
  status::TracePart part;
  part.rank = 1;
  part.epoch_ns = 1700000000123456789;
  part.threads = {{1, "training loop"}, {2, "communication thread"}};
  part.spans = {{1, "step", 1000, 5000, {{"step", 7}}},
                {2, "allreduce", 1500, 2001, {{"seq", 3}, {"bucket", 0}, {"bytes", 76800}}},
                {1, "plain", 0, 1, {}}};
  std::string why;
  ASSERT_TRUE(status::write_trace_part(dir_, part, &why)) << why;
  EXPECT_FALSE(status::take_trace_part(dir_, 0)) << "rank 0 wrote none";
  const auto got = status::take_trace_part(dir_, 1);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->epoch_ns, part.epoch_ns);
  EXPECT_EQ(got->threads, part.threads);
  ASSERT_EQ(got->spans.size(), 3u);
  EXPECT_EQ(got->spans[0].name, "step");
  EXPECT_EQ(got->spans[0].start_ns, 1000);
  EXPECT_EQ(got->spans[0].dur_ns, 5000);
  EXPECT_EQ(got->spans[0].args, (status::TraceArgs{{"step", 7}}));
  EXPECT_EQ(got->spans[1].args, (status::TraceArgs{{"bucket", 0}, {"bytes", 76800}, {"seq", 3}})) << "in name order";
  EXPECT_TRUE(got->spans[2].args.empty());
  EXPECT_FALSE(status::take_trace_part(dir_, 1)) << "taken: removed";
}

TEST_F(StatusDir, AnUnparsableTracePartIsLeftAlone) {
  std::ofstream(dir_ + "/trace-rank0.json") << "{\"rank\": 0, \"epoch_ns\":";
  EXPECT_FALSE(status::take_trace_part(dir_, 0));
  EXPECT_EQ(access((dir_ + "/trace-rank0.json").c_str(), F_OK), 0);
}

// A span name that is not UTF-8 (a user's) is written with U+FFFD in its place: the rank's timeline
// is not lost, and no descriptor is left open by the writes.
TEST_F(StatusDir, ATracePartWithANameThatIsNotUtf8IsWrittenWithTheReplacementCharacter) {
  status::TracePart part;
  part.rank = 0;
  part.spans = {{1, "bad \xff name", 0, 1, {}}};
  const auto open_fds = [] {
    int n = 0;
    if (DIR* d = opendir("/proc/self/fd")) {
      while (readdir(d)) ++n;
      closedir(d);
    }
    return n;
  };
  const int before = open_fds();
  for (int i = 0; i < 3; ++i) {
    std::string why;
    ASSERT_TRUE(status::write_trace_part(dir_, part, &why)) << why;
    const auto got = status::take_trace_part(dir_, 0);
    ASSERT_TRUE(got);
    ASSERT_EQ(got->spans.size(), 1u);
    EXPECT_EQ(got->spans[0].name, "bad \xef\xbf\xbd name");
  }
  EXPECT_EQ(open_fds(), before);
}

TEST_F(StatusDir, TempDirIsTmpdirElseTmp) {
  const char* saved = std::getenv("TMPDIR");
  const std::string keep = saved ? saved : "";
  setenv("TMPDIR", dir_.c_str(), 1);
  EXPECT_EQ(status::temp_dir(), dir_);
  setenv("TMPDIR", "", 1);
  EXPECT_EQ(status::temp_dir(), "/tmp");
  unsetenv("TMPDIR");
  EXPECT_EQ(status::temp_dir(), "/tmp");
  if (saved) setenv("TMPDIR", keep.c_str(), 1);
}

TEST_F(StatusDir, MakeDirsMakesEveryPart) {
  std::string why;
  ASSERT_TRUE(files::make_dirs(dir_ + "/a/b/c", &why)) << why;
  EXPECT_TRUE(files::make_dirs(dir_ + "/a/b/c", &why)) << "existing parts are fine";
  std::ofstream(dir_ + "/file") << "x";
  EXPECT_FALSE(files::make_dirs(dir_ + "/file/d", &why));
  EXPECT_EQ(why.rfind("cannot create directory " + dir_ + "/file/d", 0), 0u) << why;
}
