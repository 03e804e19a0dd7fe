// The fault matrix: a data-parallel job of 2 and of 3 ranks in which rank 1 misbehaves at step 20
// while the others keep training, run through the real `xlaunch run`, mpirun and runtime. For each
// fault: xlaunch's exit code, the time from the fault to xlaunch's exit, the rank it names, the
// flight recorder's table (every rank's last collectives), and that no process of the job is left
// afterwards. And a desync (rank 2 calls acc.reduce where the others call acc.gather), which the
// flight recorder names.
#include <dirent.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "../e2e/process.h"
#include "scratch_dir.h"

namespace {

constexpr int kTimeoutS = 10;  // the config's timeout_s

struct Fault {
  const char* name;
  int exit_code;
  double max_seconds;  // from the fault to xlaunch's exit
  const char* says;    // in xlaunch's output
};

const Fault kFaults[] = {
    {"exit3", 3, 3, "rank 1 exited with code 3"},
    {"return1", 1, 3, "rank 1 exited with code 1"},
    {"exit0_early", 1, 3, "rank 1 finished (exit code 0) and left the job"},
    {"throw", 128 + SIGABRT, 3, "rank 1 was killed by signal 6 (SIGABRT)"},
    {"segv", 128 + SIGSEGV, 3, "rank 1 was killed by signal 11 (SIGSEGV)"},
    {"kill9", 128 + SIGKILL, 3, "rank 1 was killed by signal 9 (SIGKILL)"},
    {"hang", 124, kTimeoutS + 5, "job stuck: "},
    {"mismatch", 1, 3, "collective mismatch at #"},
};

long long realtime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

// Processes whose command line names `needle` (the job's mpirun, wrappers and ranks all do).
std::vector<std::string> processes_naming(const std::string& needle) {
  std::vector<std::string> found;
  DIR* d = opendir("/proc");
  while (dirent* e = readdir(d)) {
    if (!std::isdigit(static_cast<unsigned char>(e->d_name[0]))) continue;
    std::ifstream in(std::string("/proc/") + e->d_name + "/cmdline", std::ios::binary);
    std::string cmd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    std::ifstream st(std::string("/proc/") + e->d_name + "/stat");
    std::string stat;
    std::getline(st, stat);
    const bool zombie = stat.find(") Z ") != std::string::npos;
    if (!zombie && cmd.find(needle) != std::string::npos) found.push_back(std::string(e->d_name) + ": " + cmd);
  }
  closedir(d);
  return found;
}

class FaultMatrix : public xlaunch::test::ScratchDirTest<::testing::TestWithParam<std::tuple<Fault, int>>> {};

TEST_P(FaultMatrix, EndsFastNamesTheRankLeavesNothing) {
  const Fault& f = std::get<0>(GetParam());
  const int ranks = std::get<1>(GetParam());
  const std::string config = dir_ + "/config.yaml";
  std::ofstream(config) << "distributed_type: MULTI_CPU\nuse_cpu: true\nnum_processes: " << ranks
                        << "\ntimeout_s: " << kTimeoutS << "\ndebug: " << (std::string(f.name) == "mismatch" ? "true" : "false")
                        << "\n";
  const auto r = xlaunch::test::run(
      {XLAUNCH_BIN, "run", "--config_file", config, FAULT_BIN, "--fault", f.name, "--fault_rank", "1", "--fault_step",
       "20"},
      {"TMPDIR=" + dir_, "XDG_CONFIG_HOME=" + dir_});
  const long long ended = realtime_ns();
  EXPECT_EQ(r.exit_code, f.exit_code) << r.output;

  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("rank 1 injects \\w+ at step 20 at (\\d+)"))) << r.output;
  const double seconds = static_cast<double>(ended - std::stoll(m[1])) / 1e9;
  EXPECT_LE(seconds, f.max_seconds) << r.output;
  EXPECT_NE(r.output.find(f.says), std::string::npos) << "expected '" << f.says << "' in:\n" << r.output;
  EXPECT_NE(r.output.find("from rank 1\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("last collectives:\n"), std::string::npos) << r.output;
  if (std::string(f.name) == "hang")  // the others wait in the step's allreduce, which rank 1 never enters
    EXPECT_NE(r.output.find("xlaunch: every rank but 1 entered allreduce #"), std::string::npos) << r.output;

  std::vector<std::string> left;
  for (int i = 0; i < 20 && !(left = processes_naming(FAULT_BIN)).empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_TRUE(left.empty()) << "left behind:\n" << ::testing::PrintToString(left);
  std::printf("fault=%s ranks=%d rc=%d seconds_to_exit=%.2f\n", f.name, ranks, r.exit_code, seconds);
}

// The flight recorder on a desync: at step 20 ranks 0, 1 and 3 call acc.gather and rank 2 acc.reduce.
// However the job ends (the watchdog's verdict, or the communicator's error), the failure shows the
// table and names rank 2 as the one on another path.
class Desync : public xlaunch::test::ScratchDirTest<::testing::Test> {};

TEST_F(Desync, TheFlightRecorderNamesTheRankOnAnotherPath) {
  const std::string config = dir_ + "/config.yaml";
  std::ofstream(config) << "distributed_type: MULTI_CPU\nuse_cpu: true\nnum_processes: 4\ntimeout_s: " << kTimeoutS
                        << "\nlog_dir: " << dir_ << "/logs\n";
  const auto r = xlaunch::test::run(
      {XLAUNCH_BIN, "run", "--config_file", config, FAULT_BIN, "--fault", "desync", "--fault_rank", "2", "--fault_step",
       "20"},
      {"TMPDIR=" + dir_, "XDG_CONFIG_HOME=" + dir_});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("last collectives:\n"), std::string::npos) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m,
                                std::regex("xlaunch: rank 2 is in allreduce #(\\d+) while ranks 0, 1, 3 are in "
                                           "allgather #(\\d+): the training loop took another path on rank 2")))
      << r.output;
  EXPECT_EQ(m[1], m[2]);
  EXPECT_NE(r.output.find("from rank 2\n"), std::string::npos) << r.output;
  // Saved in the log_dir, and `xlaunch debug` prints it again.
  const auto debug = xlaunch::test::run({XLAUNCH_BIN, "debug", dir_ + "/logs"}, {});
  EXPECT_EQ(debug.exit_code, 0) << debug.output;
  EXPECT_NE(debug.output.find("the training loop took another path on rank 2"), std::string::npos) << debug.output;
}

INSTANTIATE_TEST_SUITE_P(Faults, FaultMatrix, ::testing::Combine(::testing::ValuesIn(kFaults), ::testing::Values(2, 3)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param).name) + "_n" +
                                  std::to_string(std::get<1>(info.param));
                         });

}  // namespace
