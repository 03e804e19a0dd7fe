// `xlaunch run` end to end: the real binary, the real mpirun, real ranks.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <fstream>

#include "process.h"
#include "scratch_dir.h"

using xlaunch::test::has;
using xlaunch::test::run;
using xlaunch::test::spawn;

namespace {

// Each test runs with its own empty config home, so no user config leaks in, and on the CPU
// (--cpu), so the result does not depend on how many GPUs the machine has.
class RunE2E : public xlaunch::test::ScratchDirTest<> {
 protected:
  void SetUp() override {
    ScratchDirTest::SetUp();
    env_ = {"XDG_CONFIG_HOME=" + dir_ + "/config", "XLAUNCH_CONFIG_FILE", "TMPDIR=" + dir_};
  }

  // A fake mpirun first in PATH that leaves a marker when started at all.
  std::string fake_mpirun_path(const std::string& version_text) {
    const std::string bin = dir_ + "/fakebin";
    mkdir(bin.c_str(), 0755);
    std::ofstream(bin + "/mpirun") << "#!/bin/sh\ntouch " << dir_ << "/mpirun-started\necho '" << version_text << "'\n";
    chmod((bin + "/mpirun").c_str(), 0755);
    return "PATH=" + bin + ":/usr/bin:/bin";
  }
  bool mpirun_started() const { return access((dir_ + "/mpirun-started").c_str(), F_OK) == 0; }

  std::vector<std::string> with(std::vector<std::string> extra) const {
    extra.insert(extra.begin(), env_.begin(), env_.end());
    return extra;
  }

  std::vector<std::string> env_;
};

}  // namespace

TEST_F(RunE2E, HelloAllreduceOnTwoRanks) {
  const auto r = run({XLAUNCH_BIN, "run", "--cpu", "-n", "2", HELLO_BIN}, env_);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "hello from rank 0 of 2")) << r.output;
  EXPECT_TRUE(has(r.output, "hello from rank 1 of 2")) << r.output;
  EXPECT_TRUE(has(r.output, "rank 0: allreduce sum = 3, expected 3: OK")) << r.output;
  EXPECT_TRUE(has(r.output, "rank 1: allreduce sum = 3, expected 3: OK")) << r.output;
  EXPECT_TRUE(has(r.output, "no config file at " + dir_ + "/config/xlaunch/default_config.yaml, using built-in defaults"))
      << r.output;
  // The ranks' status directory is cleaned up.
  EXPECT_EQ(std::system(("test -z \"$(ls -A " + dir_ + ")\"").c_str()), 0) << "left in " << dir_;
}

TEST_F(RunE2E, AFailedJobIsRestartedUpToMaxRestarts) {
  const std::string cfg = dir_ + "/restart.yaml";
  std::ofstream(cfg) << "distributed_type: MULTI_CPU\nnum_processes: 2\nmax_restarts: 1\n";
  const auto r = run({XLAUNCH_BIN, "run", "--cpu", "--verbose", "--config_file", cfg, RANK_EXIT_BIN, "--fail_rank", "1", "--code",
                      "5"},
                     env_);
  EXPECT_EQ(r.exit_code, 5) << r.output;
  EXPECT_TRUE(has(r.output, "xlaunch: restarting the job (restart 1 of 1)")) << r.output;
  EXPECT_TRUE(has(r.output, "rank 1 restart 0")) << r.output;
  EXPECT_TRUE(has(r.output, "rank 1 restart 1")) << r.output;
  EXPECT_FALSE(has(r.output, "restart 2")) << r.output;
  // --verbose prints the command (the exports in the settings table's order).
  EXPECT_TRUE(has(r.output, "launching:\nexport XLAUNCH_")) << r.output;
  EXPECT_TRUE(has(r.output, "\nexport XLAUNCH_USE_CPU=1\n")) << r.output;
}

TEST_F(RunE2E, ArgumentsAfterTheBinaryPassThroughUnchanged) {
  const auto r = run({XLAUNCH_BIN, "run", "--cpu", "-n", "2", "--mixed_precision", "bf16", RANK_EXIT_BIN, "--epochs", "3", "-n",
                      "5", "--", "--help"},
                     env_);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "rank 0 of 2 pid")) << r.output;
  EXPECT_TRUE(has(r.output, "args: --epochs 3 -n 5 -- --help")) << r.output;
  EXPECT_TRUE(has(r.output, "rank 1 env XLAUNCH_MIXED_PRECISION=bf16")) << r.output;
  // `--` before the binary ends xlaunch's options too.
  const auto r2 = run({XLAUNCH_BIN, "run", "-n", "1", "--", RANK_EXIT_BIN, "--verbose"}, env_);
  EXPECT_EQ(r2.exit_code, 0) << r2.output;
  EXPECT_TRUE(has(r2.output, "args: --verbose")) << r2.output;
}

TEST_F(RunE2E, ARankExitCodeBecomesXlaunchsAndTheRankIsNamed) {
  const auto r = run({XLAUNCH_BIN, "run", "--cpu", "-n", "2", RANK_EXIT_BIN, "--fail_rank", "1", "--code", "3", "--sleep", "30"},
                     env_);
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_TRUE(has(r.output, "xlaunch: job failed: rank 1 exited with code 3")) << r.output;
}

TEST_F(RunE2E, ARankKilledByASignalIsNamed) {
  const auto r = run({XLAUNCH_BIN, "run", "--cpu", "-n", "2", RANK_EXIT_BIN, "--fail_rank", "0", "--signal", "9"}, env_);
  EXPECT_EQ(r.exit_code, 128 + 9) << r.output;
  EXPECT_TRUE(has(r.output, "rank 0 was killed by signal 9 (SIGKILL)")) << r.output;
}

// Issue 16's attack, from inside the status directory: links where the wrappers write their exit
// statuses, pointing at a file of the user's. The status directory is new, private and named
// unguessably; the links are replaced, not followed; the job's outcome is still reported right;
// nothing is left behind.
TEST_F(RunE2E, LinksInTheStatusDirectoryAreNotFollowed) {
  const std::string victim = dir_ + "/victim", script = dir_ + "/plant.sh";
  std::ofstream(victim) << "precious\n";
  std::ofstream(script) << "#!/bin/sh\n"
                           "d=\"$XLAUNCH_STATUS_DIR\"; r=$OMPI_COMM_WORLD_RANK\n"
                           "stat -c \"status_dir=%n mode=%a owner=%u\" \"$d\"\n"
                           "ln -s " << victim << " \"$d/rank-$r.tmp\"; ln -s " << victim << " \"$d/rank-$r\"\n"
                           "[ \"$r\" = 1 ] && exit 3\nexit 0\n";
  chmod(script.c_str(), 0755);
  const auto r = run({XLAUNCH_BIN, "run", "--cpu", "-n", "2", script}, env_);
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_TRUE(has(r.output, "xlaunch: exit code 3, from rank 1")) << r.output;
  EXPECT_TRUE(has(r.output, "mode=700 owner=" + std::to_string(geteuid()))) << r.output;
  std::ifstream in(victim);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "precious\n");
  // Named with a random part after run id and attempt, and removed with what the ranks left.
  const size_t at = r.output.find("status_dir=" + dir_ + "/xlaunch-status-");
  ASSERT_NE(at, std::string::npos) << r.output;
  const std::string path = r.output.substr(at + 11, r.output.find(' ', at) - at - 11);
  EXPECT_EQ(path.size() - path.rfind("-0-"), 9u) << path << ": six random characters after the attempt";
  EXPECT_NE(access(path.c_str(), F_OK), 0) << path << " was removed";
}

TEST_F(RunE2E, MissingBinaryIsReportedBeforeAnythingStarts) {
  const auto r = run({XLAUNCH_BIN, "run", "--cpu", "-n", "2", dir_ + "/no_such_train"}, with({fake_mpirun_path("x")}));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "training binary '" + dir_ + "/no_such_train' not found")) << r.output;
  EXPECT_FALSE(mpirun_started());
  const auto bare = run({XLAUNCH_BIN, "run", "no_such_train_in_path"}, env_);
  EXPECT_EQ(bare.exit_code, 2) << bare.output;
  EXPECT_TRUE(has(bare.output, "not found in PATH")) << bare.output;
}

TEST_F(RunE2E, BadConfigIsRefusedBeforeLaunch) {
  const std::string cfg = dir_ + "/bad.yaml";
  std::ofstream(cfg) << "distributed_type: MULTI_CPU\nnum_processes: 0\n";
  const auto r = run({XLAUNCH_BIN, "run", "--config_file", cfg, RANK_EXIT_BIN}, with({fake_mpirun_path("x")}));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r.output, cfg + ":2: key 'num_processes': found '0'; allowed: an integer >= 1")) << r.output;
  EXPECT_FALSE(mpirun_started());
  // The same file named by XLAUNCH_CONFIG_FILE, and a typo with its suggestion.
  std::ofstream(cfg) << "num_proceses: 2\n";
  const auto r2 = run({XLAUNCH_BIN, "run", RANK_EXIT_BIN}, with({"XLAUNCH_CONFIG_FILE=" + cfg, fake_mpirun_path("x")}));
  EXPECT_EQ(r2.exit_code, 2) << r2.output;
  EXPECT_TRUE(has(r2.output, "did you mean 'num_processes'?")) << r2.output;
  EXPECT_FALSE(mpirun_started());
}

// timeout_s: 0 means "no watchdog" in the config as in the runtime: accepted, exported as 0, and
// the user is told that nothing then bounds a stuck collective.
TEST_F(RunE2E, TimeoutZeroTurnsTheWatchdogOffWithAWarning) {
  const std::string cfg = dir_ + "/nowatch.yaml";
  std::ofstream(cfg) << "timeout_s: 0\n";
  const auto r = run({XLAUNCH_BIN, "run", "--config_file", cfg, "--dry_run", RANK_EXIT_BIN}, env_);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "export XLAUNCH_TIMEOUT_S=0")) << r.output;
  EXPECT_TRUE(has(r.output, "warning: timeout_s is 0: the collective watchdog is off")) << r.output;
}

TEST_F(RunE2E, BadCommandLineValueIsAUsageError) {
  const auto r = run({XLAUNCH_BIN, "run", "-n", "0", RANK_EXIT_BIN}, env_);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "command line: key 'num_processes': found '0'")) << r.output;
  EXPECT_EQ(run({XLAUNCH_BIN, "run", "--no_such_option", RANK_EXIT_BIN}, env_).exit_code, 2);
  EXPECT_EQ(run({XLAUNCH_BIN, "run", "--mixed_precision", "fp8", RANK_EXIT_BIN}, env_).exit_code, 2);
  EXPECT_EQ(run({XLAUNCH_BIN, "run"}, env_).exit_code, 2);
}

TEST_F(RunE2E, AnotherMpiIsRefusedWithTheFix) {
  const auto r = run({XLAUNCH_BIN, "run", RANK_EXIT_BIN}, with({fake_mpirun_path("HYDRA build details:")}));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "is not Open MPI's mpirun")) << r.output;
  EXPECT_TRUE(has(r.output, "install openmpi-bin")) << r.output;
  const auto none = run({XLAUNCH_BIN, "run", RANK_EXIT_BIN}, with({"PATH=" + dir_}));
  EXPECT_EQ(none.exit_code, 2) << none.output;
  EXPECT_TRUE(has(none.output, "mpirun not found in PATH: install Open MPI")) << none.output;
}

// SIGTERM (a scheduler's cancel) and SIGINT (Ctrl-C) stop every rank; the exit code is the
// shell's 128 + signal, whatever the ranks died of.
TEST_F(RunE2E, ASignalStopsTheWholeJob) {
  for (const auto& [sig, name] : {std::pair{SIGTERM, "signal 15 (SIGTERM)"}, std::pair{SIGINT, "signal 2 (SIGINT)"}}) {
    auto c = spawn({XLAUNCH_BIN, "run", "--cpu", "-n", "2", RANK_EXIT_BIN, "--sleep", "60"}, env_);
    ASSERT_TRUE(c.read_until("rank 0 ready", 60) && c.read_until("rank 1 ready", 60)) << c.output;
    const auto started = std::chrono::steady_clock::now();
    kill(c.pid, sig);
    const int code = c.wait();
    EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(20));
    EXPECT_EQ(code, 128 + sig) << c.output;
    EXPECT_TRUE(has(c.output, name)) << c.output;
    // Both ranks are gone: no such process, or a zombie (dead; a rank whose wrapper Open MPI's
    // daemon had to SIGKILL before it reaped it waits there for PID 1 to reap it).
    for (const char* tag : {"rank 0 of 2 pid ", "rank 1 of 2 pid "}) {
      const pid_t pid = std::atoi(c.output.c_str() + c.output.find(tag) + std::strlen(tag));
      std::string stat;
      std::getline(std::ifstream("/proc/" + std::to_string(pid) + "/stat"), stat);
      const size_t close = stat.rfind(')');
      const bool zombie = close != std::string::npos && stat.compare(close, 4, ") Z ") == 0;
      EXPECT_TRUE(kill(pid, 0) != 0 || stat.empty() || zombie) << pid << ": " << stat;
    }
  }
}

TEST_F(RunE2E, ConfigDefaultThenRunUsesIt) {
  const std::string cfg = dir_ + "/cfg/my.yaml";
  auto w = run({XLAUNCH_BIN, "config", "default", "--cpu", "--config_file", cfg, "-n", "2", "--mixed_precision", "fp16"}, env_);
  ASSERT_EQ(w.exit_code, 0) << w.output;
  // Never overwritten without asking.
  auto again = run({XLAUNCH_BIN, "config", "default", "--config_file", cfg}, env_);
  EXPECT_EQ(again.exit_code, 2) << again.output;
  EXPECT_TRUE(has(again.output, "already exists; pass --force")) << again.output;
  const auto r = run({XLAUNCH_BIN, "run", "--cpu", "--config_file", cfg, RANK_EXIT_BIN}, env_);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "config " + cfg + " (from --config_file)")) << r.output;
  EXPECT_TRUE(has(r.output, "rank 1 of 2 pid")) << r.output;
  EXPECT_TRUE(has(r.output, "rank 0 env XLAUNCH_MIXED_PRECISION=fp16")) << r.output;
  // CLI beats the file.
  const auto d = run({XLAUNCH_BIN, "run", "--config_file", cfg, "-n", "1", "--cpu", "--dry_run", RANK_EXIT_BIN}, env_);
  EXPECT_EQ(d.exit_code, 0) << d.output;
  EXPECT_TRUE(has(d.output, " -np 1 ")) << d.output;
  EXPECT_TRUE(has(d.output, "export XLAUNCH_MIXED_PRECISION=fp16")) << d.output;
  EXPECT_TRUE(has(d.output, "from the command line: num_processes")) << d.output;
}

TEST_F(RunE2E, EnvReportsVersionsAndTheConfig) {
  const std::string cfg = dir_ + "/cfg.yaml";
  std::ofstream(cfg) << "distributed_type: MULTI_CPU\nnum_processes: 2\n";
  const auto r = run({XLAUNCH_BIN, "env", "--config_file", cfg}, env_);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* line : {"xlaunch version: ", "compiler: ", "LibTorch: ", "CUDA runtime: ", "CUDA driver: ", "NCCL: ",
                           "Open MPI: ", "GPUs: ", "CPU cores: ", "memory: "})
    EXPECT_TRUE(has(r.output, std::string("\n") + line) || r.output.rfind(line, 0) == 0) << line << "\n" << r.output;
  EXPECT_TRUE(has(r.output, "config file: " + cfg + " (from --config_file)")) << r.output;
  EXPECT_TRUE(has(r.output, "num_processes: 2")) << r.output;
  EXPECT_TRUE(has(r.output, "config status: valid")) << r.output;
}
