// The examples and `xlaunch test` end to end: the real xlaunch, mpirun and ranks, on the CPU.
#include <gtest/gtest.h>
#include <dirent.h>
#include <sys/stat.h>

#include <fstream>
#include <regex>

#include "process.h"
#include "scratch_dir.h"

using xlaunch::test::count;
using xlaunch::test::has;
using xlaunch::test::run;

namespace {

// Each test has its own config home and temporary directory, and a 2-process CPU config.
class ExamplesE2E : public xlaunch::test::ScratchDirTest<> {
 protected:
  void SetUp() override {
    ScratchDirTest::SetUp();
    env_ = {"XDG_CONFIG_HOME=" + dir_ + "/config", "XLAUNCH_CONFIG_FILE", "TMPDIR=" + dir_};
    config_ = dir_ + "/two_cpu.yaml";
    std::ofstream(config_) << "distributed_type: MULTI_CPU\nnum_processes: 2\n";
  }

  std::string config_;
  std::vector<std::string> env_;
};

// TensorBoard event files in dir.
int event_files(const std::string& dir) {
  int n = 0;
  DIR* d = opendir(dir.c_str());
  if (!d) return -1;
  while (const dirent* e = readdir(d)) n += std::string(e->d_name).rfind("events.out.tfevents.", 0) == 0;
  closedir(d);
  return n;
}

const std::regex kSummary(R"(\nepoch=(\d+) train_loss=(\d+\.\d{4}) test_acc=(\d\.\d{4}) samples_per_s=(\d+\.\d) seconds=(\d+\.\d)\n)");

}  // namespace

// One short epoch on 2 ranks: the summary line's exact format, an accuracy far above chance (10%),
// progress lines from rank 0 only; then --resume continues at epoch 2 from the checkpoint.
TEST_F(ExamplesE2E, TrainFashionMnistShortRunAndResume) {
  const std::string ckpt = dir_ + "/ckpt";
  const std::vector<std::string> train = {XLAUNCH_BIN, "run", "--config_file", config_, TRAIN_FASHION_MNIST_BIN,
                                          "--limit_train", "6000", "--project_dir", ckpt};
  auto args = train;
  args.insert(args.end(), {"--epochs", "1"});
  const auto r = run(args, env_);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, kSummary)) << r.output;
  EXPECT_EQ(m[1], "1");
  EXPECT_GT(std::stod(m[3]), 0.70) << r.output;
  EXPECT_EQ(count(r.output, "\nepoch=1 "), 1) << r.output;  // rank 0 only
  // Not a terminal: plain progress lines, one per tenth of the epoch, then the final one.
  EXPECT_TRUE(has(r.output, "epoch 1/1 [########################] 100% 6000/6000")) << r.output;
  EXPECT_GE(count(r.output, "epoch 1/1 ["), 5) << r.output;
  EXPECT_EQ(count(r.output, "\r"), 0) << r.output;
  // The EMA's accuracy, and the weights as safetensors for Python and xlaunch::load_model.
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(\nema_test_acc=0\.\d{4}\n)"))) << r.output;
  EXPECT_TRUE(std::ifstream(ckpt + "/model/model.safetensors").good()) << r.output;
  // Its curves: TensorBoard by default, in <project_dir>/fashion_mnist (docs/tracking.md).
  EXPECT_TRUE(has(r.output, "tracking: tensorboard in " + ckpt + "/fashion_mnist")) << r.output;
  EXPECT_EQ(event_files(ckpt + "/fashion_mnist"), 1) << r.output;

  args = train;
  args.insert(args.end(), {"--epochs", "2", "--resume"});
  const auto resumed = run(args, env_);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_TRUE(has(resumed.output, "resumed at epoch 2 (step ")) << resumed.output;
  EXPECT_TRUE(has(resumed.output, "load_state: loading " + ckpt + "/checkpoints/checkpoint_")) << resumed.output;
  EXPECT_FALSE(has(resumed.output, "\nepoch=1 ")) << resumed.output;
  ASSERT_TRUE(std::regex_search(resumed.output, m, kSummary)) << resumed.output;
  EXPECT_EQ(m[1], "2");
  EXPECT_GT(std::stod(m[3]), 0.70) << resumed.output;
  EXPECT_EQ(event_files(ckpt + "/fashion_mnist"), 2) << resumed.output;  // one per process of rank 0
}

TEST_F(ExamplesE2E, SelfTestPassesOnTwoCpuProcesses) {
  const auto r = run({XLAUNCH_BIN, "test", "--config_file", config_}, env_);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "xlaunch test: 2 processes, device cpu, communicator mpi")) << r.output;
  EXPECT_EQ(count(r.output, "  PASS  "), 8) << r.output;
  EXPECT_EQ(count(r.output, "FAIL"), 0) << r.output;
  EXPECT_TRUE(has(r.output, "PASS  DDP gradients against one process\n")) << r.output;
  EXPECT_TRUE(has(r.output, "\nxlaunch test: all 8 checks passed on 2 processes\n")) << r.output;
}

// A rank that reports a wrong allreduce result fails that check, named with the rank; the others pass.
TEST_F(ExamplesE2E, SelfTestNamesTheFailedCheckAndRank) {
  const auto r = run({XLAUNCH_BIN, "test", "--config_file", config_, "--", "--fault", "allreduce@1"}, env_);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "  FAIL  allreduce (sum, mean, max)\n      rank 1: sum of rank+1: got [4, 4, 4, 4, 4, 4, ...] expected [3, 3, 3, 3, 3, 3, ...]\n")) << r.output;
  EXPECT_EQ(count(r.output, "  PASS  "), 7) << r.output;
  EXPECT_TRUE(has(r.output, "\nxlaunch test: FAILED: allreduce (sum, mean, max) on rank 1\n")) << r.output;
}

TEST_F(ExamplesE2E, SelfTestBinaryMissingIsAUsageError) {
  const auto r = run({XLAUNCH_BIN, "test", "--config_file", config_, "--selftest_bin", dir_ + "/nothing"}, env_);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "'" + dir_ + "/nothing' not found")) << r.output;
}

// The PPO example's last line: the mean return of the last 100 episodes reached 475 within the
// 500,000 environment steps, and it exited 0.
template <class Result>
void expect_ppo_reached(const Result& r) {
  const std::regex done(R"(\nppo: reached mean_return_last100=(\d+\.\d) >= 475 at env_steps=(\d+) of 500000 )");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, done)) << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_GE(std::stod(m[1]), 475.0);
  EXPECT_LE(std::stoll(m[2]), 500000);
}

// The PPO example (docs/rl.md): on 2 ranks its mean return over the last 100 episodes reaches 475
// within 500,000 environment steps.
TEST_F(ExamplesE2E, PpoCartPoleTwoRanksLearnWithinTheBudget) {
  const auto r = run({XLAUNCH_BIN, "run", "--config_file", config_, "-n", "2", PPO_CARTPOLE_BIN, "--project_dir",
                      dir_ + "/ppo"},
                     env_);
  expect_ppo_reached(r);
  EXPECT_EQ(count(r.output, "\nppo: reached "), 1) << r.output;  // the main process only
  // Progress lines with the job's environment steps per second; the report counts them as samples.
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(\nppo: update=10 env_steps=\d+ episodes=\d+ mean_return_last100=\d+\.\d env_sps=\d+ pool_sps=\d+\n)")))
      << r.output;
  // The utilization report of the job (tests/rl's env_pool_test checks that the pool's waits are
  // data wait; here their share is too small to assert on).
  EXPECT_TRUE(has(r.output, "xlaunch: utilization, steps ")) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(\n0 +[0-9.]+ +[1-9][0-9]*\.[0-9] )"))) << "samples/s: " << r.output;
}

// The same with the environments stepped as tensors (--backend tensor, rl::TensorEnv): it learns
// within the same budget.
TEST_F(ExamplesE2E, PpoCartPoleTensorBackendLearnsWithinTheBudget) {
  const auto r = run({XLAUNCH_BIN, "run", "--config_file", config_, "-n", "2", PPO_CARTPOLE_BIN, "--backend", "tensor",
                      "--project_dir", dir_ + "/ppo_tensor"},
                     env_);
  expect_ppo_reached(r);
}
