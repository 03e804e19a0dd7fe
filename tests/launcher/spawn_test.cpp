// The spawn-and-forward routine both the job (mpirun under `xlaunch run`) and the rank wrapper
// (the training process under `xlaunch __rank`) run their child with.
#include "launch/spawn.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include "scratch_dir.h"

using namespace xlaunch::launcher;

namespace {

int exit_code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }

// True once `pid` has ended (gone, or a zombie nobody has reaped yet).
bool ended(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string pid_field, comm, state;
  return !(stat >> pid_field >> comm >> state) || state == "Z" || state == "X";
}

}  // namespace

TEST(MergedEnvironment, ExtraWinsSortedAndMalformedEntriesDropped) {
  const char* base[] = {"B=2", "A=1", "JUNK", "C=x=y", nullptr};
  EXPECT_EQ(merged_environment(base, {{"B", "3"}, {"D", ""}}),
            (std::vector<std::string>{"A=1", "B=3", "C=x=y", "D="}));
}

TEST(Spawn, ReturnsTheChildsStatusAndGivesItTheExtraEnvironment) {
  SpawnOptions o;
  o.env = {{"XLAUNCH_SPAWN_TEST_CODE", "7"}};
  EXPECT_EQ(exit_code(spawn_and_wait({"/bin/sh", "-c", "exit $XLAUNCH_SPAWN_TEST_CODE"}, o)), 7);
}

TEST(Spawn, SearchesPathOnlyWhenAsked) {
  SpawnOptions o;
  o.search_path = true;
  EXPECT_EQ(exit_code(spawn_and_wait({"sh", "-c", "exit 3"}, o)), 3);
  o.search_path = false;  // "sh" is then a path relative to the current directory, where none is
  EXPECT_EQ(exit_code(spawn_and_wait({"sh", "-c", "exit 3"}, o)), 127);
}

TEST(Spawn, ForwardsASignalToTheChildThenRestoresTheHandler) {
  SpawnOptions o;
  o.forwarded = {SIGUSR1};
  // The child signals us; only our forwarding ends it before its sleep does.
  const int status = spawn_and_wait({"/bin/sh", "-c", "kill -USR1 $PPID; exec sleep 20"}, o);
  ASSERT_TRUE(WIFSIGNALED(status)) << "exit code " << exit_code(status);
  EXPECT_EQ(WTERMSIG(status), SIGUSR1);
  EXPECT_EQ(last_forwarded_signal(), SIGUSR1);
  struct sigaction now {};
  sigaction(SIGUSR1, nullptr, &now);
  EXPECT_EQ(now.sa_handler, SIG_DFL);
}

TEST(Spawn, KeepsTheForwardingHandlerWhenAskedSoALateSignalIsHarmless) {
  SpawnOptions o;
  o.forwarded = {SIGUSR2};
  o.restore_handlers = false;
  EXPECT_EQ(exit_code(spawn_and_wait({"/bin/true"}, o)), 0);
  raise(SIGUSR2);  // would end this test program under the default action
  EXPECT_EQ(last_forwarded_signal(), SIGUSR2);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigaction(SIGUSR2, &dfl, nullptr);
}

TEST(Spawn, TheChildDiesWithItsParentWhenAsked) {
  const xlaunch::test::ScratchDir scratch;
  const std::string dir = scratch.path;
  const std::string pid_file = dir + "/pid";
  const pid_t parent = fork();
  ASSERT_GE(parent, 0);
  if (parent == 0) {  // stands in for `xlaunch __rank`
    SpawnOptions o;
    o.die_with_parent = true;
    spawn_and_wait({"/bin/sh", "-c", "echo $$ > " + pid_file + ".tmp; mv " + pid_file + ".tmp " + pid_file +
                                         "; exec sleep 60"}, o);
    _exit(0);
  }
  pid_t child = 0;
  for (int i = 0; i < 500 && !child; ++i) {
    std::ifstream(pid_file) >> child;
    if (!child) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(parent, SIGKILL);
  waitpid(parent, nullptr, 0);
  ASSERT_GT(child, 0) << "the child never started";
  bool gone = false;
  for (int i = 0; i < 500 && !gone; ++i) {
    gone = ended(child);
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!gone) kill(child, SIGKILL);
  EXPECT_TRUE(gone) << "the child outlived its parent";
  unlink(pid_file.c_str());
  rmdir(dir.c_str());
}
