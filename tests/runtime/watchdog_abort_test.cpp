// The watchdog's end of a job (issue 22): the verdict and the exit never wait on the transports'
// abort, which can block when the peers do not abort too (NCCL issues 863, 992, 1777); an error
// raised while polling a communicator becomes the verdict, not std::terminate on its thread; a poll
// that never returns (a device query blocked in the driver) is a verdict too (issue 45). Each
// case runs in a child process (a gtest death test), which the watchdog ends; an alarm bounds the
// child, so a hang fails the test (killed by SIGALRM) instead of stalling it. On a GPU
// (scripts/gpu/run.sh) a device-side assert of a training kernel becomes the verdict too.
#include <gtest/gtest.h>

#include <ATen/ops/zeros.h>
#include <torch/cuda.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <string>

#include "scratch_dir.h"
#include "watch/watchdog.h"
#include "xlaunch/status/verdict_file.h"

#if XLAUNCH_HAVE_NCCL
#include <ATen/ops/_assert_async.h>

#include "comm/mpi_communicator.h"
#include "comm/nccl_communicator.h"
#endif

namespace {

namespace watch = xlaunch::watch;
using Clock = std::chrono::steady_clock;

constexpr int kChildBoundS = 60;  // far above timeout_s (1 s) + the abort's bound (5 s)

void start_watchdog(const std::string& dir) {
  alarm(kChildBoundS);
  watch::Settings s;
  s.rank = 0;
  s.world = 1;
  s.dir = dir;
  s.timeout_s = 1;
  watch::start(s);
}

[[noreturn]] void wait_for_the_watchdog() {
  for (;;) pause();
}

// A collective that never finishes, and a transport whose abort never returns.
[[noreturn]] void stuck_with_an_abort_that_blocks(const std::string& dir) {
  start_watchdog(dir);
  watch::add_poller([](bool ending) {
    if (ending) wait_for_the_watchdog();
    return std::string();
  });
  watch::started(watch::issued("allreduce", "float32", 1024, 4));
  wait_for_the_watchdog();
}

// A poller whose poll throws, as an event query does after a sticky CUDA error.
[[noreturn]] void a_poller_that_throws(const std::string& dir) {
  start_watchdog(dir);
  watch::add_poller([](bool ending) -> std::string {
    if (!ending) throw std::runtime_error("CUDA error: an illegal memory access was encountered");
    return "";
  });
  wait_for_the_watchdog();
}

// A poller whose query never returns, nor its abort: a CUDA call blocked in the driver behind a
// kernel that never ends. No collective is open, so only the pollers' heartbeat can tell.
[[noreturn]] void a_poller_that_blocks(const std::string& dir) {
  start_watchdog(dir);
  watch::add_poller([](bool) -> std::string { wait_for_the_watchdog(); });
  wait_for_the_watchdog();
}

// The same with a collective open on it: the collective's verdict, not a hang of the watchdog.
[[noreturn]] void stuck_behind_a_poller_that_blocks(const std::string& dir) {
  start_watchdog(dir);
  watch::add_poller([](bool) -> std::string { wait_for_the_watchdog(); });
  watch::started(watch::issued("allreduce", "bfloat16", 4096, 2));
  wait_for_the_watchdog();
}

class WatchdogEnd : public xlaunch::test::ScratchDirTest<> {
 protected:
  void SetUp() override {
    ScratchDirTest::SetUp();
    GTEST_FLAG_SET(death_test_style, "fast");  // the child forks: it writes into this test's directory
  }
};

TEST_F(WatchdogEnd, TheVerdictAndTheExitDoNotWaitForABlockedAbort) {
  const auto t0 = Clock::now();
  EXPECT_EXIT(stuck_with_an_abort_that_blocks(dir_), testing::ExitedWithCode(124),
              "did not return within 5 s; exiting without it");
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(kChildBoundS)) << "within the bound";
  const auto v = xlaunch::status::read_verdict(dir_);
  ASSERT_TRUE(v.has_value()) << "no verdict file in " << dir_;
  EXPECT_EQ(v->exit_code, 124);
  EXPECT_NE(v->message.find("job stuck: allreduce #0"), std::string::npos) << v->message;
}

// Issue 45.2: before, the watchdog ran the pollers itself and waited with them for ever (the child
// was ended by its alarm, SIGALRM, instead of exiting 124).
TEST_F(WatchdogEnd, APollerThatNeverReturnsIsAVerdictWithinTheBound) {
  const auto t0 = Clock::now();
  EXPECT_EXIT(a_poller_that_blocks(dir_), testing::ExitedWithCode(124), "the device stopped answering");
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(kChildBoundS)) << "within the bound";
  const auto v = xlaunch::status::read_verdict(dir_);
  ASSERT_TRUE(v.has_value()) << "no verdict file in " << dir_;
  EXPECT_EQ(v->exit_code, 124);
  EXPECT_NE(v->message.find("rank 0: the device stopped answering"), std::string::npos) << v->message;
  EXPECT_NE(v->message.find("has not returned for"), std::string::npos) << v->message;
}

// Both bounds run out together (the collective's and the pollers' round's, each timeout_s): either
// verdict is right, and it comes.
TEST_F(WatchdogEnd, ACollectiveStuckBehindAPollerThatNeverReturnsGetsAVerdict) {
  const auto t0 = Clock::now();
  EXPECT_EXIT(stuck_behind_a_poller_that_blocks(dir_), testing::ExitedWithCode(124),
              "job stuck: allreduce #0|the device stopped answering");
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(kChildBoundS)) << "within the bound";
  const auto v = xlaunch::status::read_verdict(dir_);
  ASSERT_TRUE(v.has_value()) << "no verdict file in " << dir_;
  EXPECT_EQ(v->exit_code, 124);
}

TEST_F(WatchdogEnd, AnErrorRaisedWhilePollingBecomesTheVerdict) {
  EXPECT_EXIT(a_poller_that_throws(dir_), testing::ExitedWithCode(1), "illegal memory access");
  const auto v = xlaunch::status::read_verdict(dir_);
  ASSERT_TRUE(v.has_value()) << "no verdict file in " << dir_;
  EXPECT_EQ(v->message, "rank 0: CUDA error: an illegal memory access was encountered");
}

#if XLAUNCH_HAVE_NCCL
// A device-side assert (torch's _assert_async on a zero) leaves a sticky error on the GPU: the
// NCCL communicator's poll reports it, and the watchdog makes it the verdict.
[[noreturn]] void a_kernel_that_fails_on_the_gpu() {
  start_watchdog("");
  auto comm = xlaunch::make_nccl_communicator(xlaunch::MpiCommunicator::world(), 0);
  at::_assert_async(at::zeros({}, at::TensorOptions().device(at::kCUDA, 0)));
  wait_for_the_watchdog();
}
#endif

TEST(CudaWatchdogEnd, AStickyCudaErrorBecomesTheVerdict) {
  if (!XLAUNCH_HAVE_NCCL) GTEST_SKIP() << "this build has no NCCL (XLAUNCH_WITH_NCCL)";
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device here (torch::cuda::is_available() is false)";
#if XLAUNCH_HAVE_NCCL
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // CUDA does not survive a fork: the child starts afresh
  const auto t0 = Clock::now();
  EXPECT_EXIT(a_kernel_that_fails_on_the_gpu(), testing::ExitedWithCode(1), "CUDA failed on rank 0 \\(cuda:0\\)");
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(kChildBoundS)) << "within the bound";
#endif
}

}  // namespace
