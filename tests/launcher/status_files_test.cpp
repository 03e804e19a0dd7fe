// The status directory and its files against another local user (docs/security.md): planted
// links are replaced, never followed; files and directories someone else owns are never read or
// written. The tests that need a second user run as root and play it with chown (uid 65534,
// "nobody"); as another user they are skipped, saying so.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <sstream>

#include "xlaunch/status/private_files.h"
#include "xlaunch/status/rank_status.h"
#include "xlaunch/status/verdict_file.h"
#include "scratch_dir.h"

using namespace xlaunch::status;
namespace files = xlaunch::files;

namespace {

constexpr uid_t kOtherUser = 65534;

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

class StatusFiles : public xlaunch::test::ScratchDirTest<> {
 protected:
  void SetUp() override {
    ScratchDirTest::SetUp();
    status_ = dir_ + "/status";
    ASSERT_EQ(mkdir(status_.c_str(), 0700), 0);
    victim_ = dir_ + "/victim";
    std::ofstream(victim_) << "precious\n";
  }

  // A directory "another user" made: owned by them, writable by all.
  std::string foreign_dir(const std::string& name) {
    const std::string d = dir_ + "/" + name;
    EXPECT_EQ(mkdir(d.c_str(), 0777), 0);
    chmod(d.c_str(), 0777);
    EXPECT_EQ(chown(d.c_str(), kOtherUser, kOtherUser), 0);
    return d;
  }

  std::string status_, victim_;  // status_: the status directory, inside the scratch dir_
};

#define REQUIRE_ROOT() \
  if (geteuid() != 0) GTEST_SKIP() << "playing another user needs root (chown)"

}  // namespace

TEST_F(StatusFiles, WriteThenRead) {
  std::string why;
  ASSERT_TRUE(write_rank_status(status_, {1, false, 3, 42}, &why)) << why;
  ASSERT_TRUE(write_rank_status(status_, {0, true, 9, 43}, &why)) << why;
  const auto all = read_rank_statuses(status_);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].rank, 0);
  EXPECT_TRUE(all[0].signaled);
  EXPECT_EQ(all[0].code, 9);
  EXPECT_EQ(all[1].code, 3);
  EXPECT_EQ(all[1].end_ns, 42);
  struct stat st {};
  ASSERT_EQ(stat((status_ + "/rank-0").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

// The attack from issue 16: links where the wrapper writes, pointing at a victim's file.
TEST_F(StatusFiles, PlantedLinksAreReplacedNotFollowed) {
  for (const char* name : {"/rank-0.tmp", "/rank-0", "/.rank-0"}) ASSERT_EQ(symlink(victim_.c_str(), (status_ + name).c_str()), 0);
  std::string why;
  ASSERT_TRUE(write_rank_status(status_, {0, false, 7, 5}, &why)) << why;
  EXPECT_EQ(slurp(victim_), "precious\n");
  struct stat st {};
  ASSERT_EQ(lstat((status_ + "/rank-0").c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode)) << "the link was replaced by the status file";
  const auto all = read_rank_statuses(status_);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].code, 7);
}

// A status file reached through a link is not read, even one whose contents parse.
TEST_F(StatusFiles, ALinkedStatusFileIsNotRead) {
  std::ofstream(dir_ + "/forged") << "1 0 0 1\n";
  ASSERT_EQ(symlink((dir_ + "/forged").c_str(), (status_ + "/rank-1").c_str()), 0);
  std::ofstream(status_ + "/verdict-target") << "124 1\nforged verdict\n";
  ASSERT_EQ(symlink((status_ + "/verdict-target").c_str(), (status_ + "/verdict").c_str()), 0);
  EXPECT_TRUE(read_rank_statuses(status_).empty());
  EXPECT_FALSE(read_verdict(status_).has_value());
}

TEST_F(StatusFiles, ADirectoryOthersMayWriteIsRefused) {
  chmod(status_.c_str(), 0777);
  std::string why;
  EXPECT_FALSE(write_rank_status(status_, {0, false, 0, 1}, &why));
  EXPECT_NE(why.find("may be written by every user"), std::string::npos) << why;
  EXPECT_TRUE(read_rank_statuses(status_).empty());
}

// A project directory: this user's, writable by the group. Accepted, as a log_dir often is.
TEST_F(StatusFiles, AGroupWritableDirectoryOfOursIsAccepted) {
  chmod(status_.c_str(), 0775);
  std::string why;
  EXPECT_TRUE(write_rank_status(status_, {0, false, 0, 1}, &why)) << why;
  EXPECT_EQ(read_rank_statuses(status_).size(), 1u);
  EXPECT_FALSE(files::make_private_dir(status_, "s-", &why).empty()) << why;
}

TEST_F(StatusFiles, AForgedStatusInAForeignDirectoryIsNeverRead) {
  REQUIRE_ROOT();
  const std::string d = foreign_dir("theirs");
  std::ofstream(d + "/rank-0") << "0 0 0 1\n";
  std::ofstream(d + "/verdict") << "0 0\nall is well\n";
  std::string why;
  EXPECT_FALSE(write_rank_status(d, {1, false, 3, 2}, &why));
  EXPECT_NE(why.find("belongs to uid 65534"), std::string::npos) << why;
  EXPECT_TRUE(read_rank_statuses(d).empty());
  EXPECT_FALSE(read_verdict(d).has_value());
  files::remove_private_dir(d);  // not ours: left alone
  EXPECT_EQ(access((d + "/rank-0").c_str(), F_OK), 0);
}

TEST_F(StatusFiles, AForeignFileInOurDirectoryIsSkipped) {
  REQUIRE_ROOT();
  std::ofstream(status_ + "/rank-1") << "1 0 5 1\n";
  ASSERT_EQ(chown((status_ + "/rank-1").c_str(), kOtherUser, kOtherUser), 0);
  std::string why;
  ASSERT_TRUE(write_rank_status(status_, {0, false, 0, 2}, &why)) << why;
  const auto all = read_rank_statuses(status_);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].rank, 0);
}

TEST_F(StatusFiles, PrivateDirectoriesAreNewUnguessableAndOnlyOurs) {
  std::string why;
  std::set<std::string> seen;
  for (int i = 0; i < 20; ++i) {
    const std::string d = files::make_private_dir(dir_, "xlaunch-status-x-0-", &why);
    ASSERT_FALSE(d.empty()) << why;
    EXPECT_TRUE(seen.insert(d).second) << "a name came twice: " << d;
    EXPECT_EQ(d.rfind(dir_ + "/xlaunch-status-x-0-", 0), 0u) << d;
    struct stat st {};
    ASSERT_EQ(lstat(d.c_str(), &st), 0);
    EXPECT_TRUE(S_ISDIR(st.st_mode));
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    EXPECT_EQ(st.st_uid, geteuid());
  }
  // A parent anyone may write to without the sticky bit: anyone could swap the directory.
  const std::string open_parent = dir_ + "/open";
  ASSERT_EQ(mkdir(open_parent.c_str(), 0700), 0);
  chmod(open_parent.c_str(), 0777);
  EXPECT_TRUE(files::make_private_dir(open_parent, "s-", &why).empty());
  EXPECT_NE(why.find("not sticky"), std::string::npos) << why;
  chmod(open_parent.c_str(), 01777);  // like /tmp
  EXPECT_FALSE(files::make_private_dir(open_parent, "s-", &why).empty()) << why;
}

TEST_F(StatusFiles, AParentAnotherUserOwnsIsRefused) {
  REQUIRE_ROOT();
  const std::string d = foreign_dir("their-logs");
  chmod(d.c_str(), 0755);
  std::string why;
  EXPECT_TRUE(files::make_private_dir(d, "xlaunch-status-", &why).empty());
  EXPECT_NE(why.find("belongs to uid 65534"), std::string::npos) << why;
}

TEST_F(StatusFiles, RemovingTheDirectoryTakesOurFilesOnly) {
  std::string why;
  ASSERT_TRUE(write_rank_status(status_, {0, false, 0, 1}, &why)) << why;
  ASSERT_EQ(symlink(victim_.c_str(), (status_ + "/progress-0").c_str()), 0);
  files::remove_private_dir(status_);
  EXPECT_NE(access(status_.c_str(), F_OK), 0) << "removed";
  EXPECT_EQ(slurp(victim_), "precious\n") << "the link went, not its target";
}
