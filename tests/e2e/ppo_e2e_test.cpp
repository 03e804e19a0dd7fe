// The PPO example end to end (docs/rl.md): `xlaunch run -n 2 ppo_cartpole` learns CartPole-v1, its
// mean return over the last 100 episodes reaching 475 within 500,000 environment steps.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>

#include "process.h"
#include "scratch_dir.h"

using xlaunch::test::count;
using xlaunch::test::has;
using xlaunch::test::run;

namespace {

class PpoE2E : public xlaunch::test::ScratchDirTest<> {
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

}  // namespace

TEST_F(PpoE2E, TwoRanksLearnCartPoleWithinTheBudget) {
  const auto r = run({XLAUNCH_BIN, "run", "--config_file", config_, "-n", "2", PPO_CARTPOLE_BIN, "--project_dir",
                      dir_ + "/ppo"},
                     env_);
  const std::regex done(R"(\nppo: reached mean_return_last100=(\d+\.\d) >= 475 at env_steps=(\d+) of 500000 )");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, done)) << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_GE(std::stod(m[1]), 475.0);
  EXPECT_LE(std::stoll(m[2]), 500000);
  EXPECT_EQ(count(r.output, "\nppo: reached "), 1) << r.output;  // the main process only
  // Progress lines with the job's environment steps per second; the report counts them as samples.
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(\nppo: update=10 env_steps=\d+ episodes=\d+ mean_return_last100=\d+\.\d env_sps=\d+ pool_sps=\d+\n)")))
      << r.output;
  // The utilization report of the job (tests/rl's env_pool_test checks that the pool's waits are
  // data wait; here their share is too small to assert on).
  EXPECT_TRUE(has(r.output, "xlaunch: utilization, steps ")) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(\n0 +[0-9.]+ +[1-9][0-9]*\.[0-9] )"))) << "samples/s: " << r.output;
}
