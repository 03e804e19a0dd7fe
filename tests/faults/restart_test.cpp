// Restarts: a job whose rank 1 exits with code 3 at the start of epoch 2, on the first attempt
// only, is restarted once (max_restarts 1), resumes from its last checkpoint (--resume), and
// ends with the same final line as the same job uninterrupted.
#include <gtest/gtest.h>

#include <cstdlib>
#include <regex>

#include "../e2e/process.h"
#include "scratch_dir.h"

namespace {

std::string final_line(const std::string& output) {
  std::smatch m;
  return std::regex_search(output, m, std::regex("epoch=3 train_loss=\\S+ test_acc=\\S+")) ? m.str() : "";
}

TEST(Restart, AFailedAttemptResumesFromItsCheckpointAndEndsTheSame) {
  const xlaunch::test::ScratchDir scratch;
  const std::string dir = scratch.path;
  const std::vector<std::string> env = {"TMPDIR=" + dir, "XDG_CONFIG_HOME=" + dir, "XLAUNCH_CONFIG_FILE"};
  const auto run = [&](const std::string& ckpt, std::vector<std::string> extra) {
    std::vector<std::string> argv = {XLAUNCH_BIN, "run", "--cpu", "-n", "2", "--max_restarts", "1", TRAIN_BIN,
                                     "--epochs", "3", "--limit_train", "3000", "--project_dir", dir + "/" + ckpt,
                                     "--resume"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return xlaunch::test::run(argv, env);
  };
  const auto clean = run("clean", {});
  ASSERT_EQ(clean.exit_code, 0) << clean.output;
  const auto faulty = run("faulty", {"--fail_at_epoch", "2"});
  ASSERT_EQ(faulty.exit_code, 0) << faulty.output;
  EXPECT_NE(faulty.output.find("rank 1 exited with code 3"), std::string::npos) << faulty.output;
  EXPECT_NE(faulty.output.find("restarting the job (restart 1 of 1)"), std::string::npos) << faulty.output;
  EXPECT_NE(faulty.output.find("load_state: loading " + dir + "/faulty/checkpoints/checkpoint_"), std::string::npos)
      << faulty.output;
  EXPECT_NE(faulty.output.find("resumed at epoch 2 (step "), std::string::npos) << faulty.output;
  ASSERT_NE(final_line(clean.output), "") << clean.output;
  EXPECT_EQ(final_line(faulty.output), final_line(clean.output)) << faulty.output;
}

}  // namespace
