// The GPU paths' logic, checked where it runs without a GPU (issue 22), and on a GPU where one is
// (scripts/gpu/run.sh runs the Cuda* tests; here they skip, saying so):
//  - the device clock's bookkeeping (phase_clock.h) leaves no error behind, whatever fails;
//  - a device communicator's pending collectives are released as they complete, with or without
//    the watchdog's thread: 10,000 collectives hold no growing queue;
//  - booleans reduce as logical or and Avg over them is refused (here: the in-process ranks);
//  - the GradScaler's found_inf of an optimizer without gradients lives on the parameters' device;
//  - on a GPU: the Accelerator makes its device current, and the real clock leaves no CUDA error.
#include <gtest/gtest.h>

#include <ATen/ops/empty.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>
#include <torch/cuda.h>
#include <torch/optim/sgd.h>

#include <memory>
#include <stdexcept>
#include <vector>

#include "bool_reduce_check.h"
#include "comm/pending_collectives.h"
#include "inprocess_ranks.h"
#include "profile/phase_clock.h"
#include "watch/board.h"
#include "xlaunch/accelerator.h"
#include "xlaunch/grad_scaler.h"

#if XLAUNCH_HAVE_CUDA
#include <ATen/ops/matmul.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>

#include "profile/device_clock.h"
#endif

namespace {

using xlaunch::profile::PhaseClock;
using xlaunch::profile::Phase;

// A stand-in for a CUDA event under CUDA's error model: a failing call sets the thread's last
// error, and so does a query that finds the work not done ("not ready"), until clear_error().
struct FakeEvent {
  static inline int last_error = 0;  // 0: none
  static inline bool fail_record = false, fail_query = false, fail_elapsed = false;
  static inline bool ready = true;
  static inline int created = 0;
  static inline float elapsed = 2.5f;  // ms
  bool live = false;
  FakeEvent() { ++created; }
  FakeEvent(FakeEvent&& o) noexcept : live(o.live) {}
  FakeEvent& operator=(FakeEvent&& o) noexcept {
    live = o.live;
    return *this;
  }
  void record(int) {
    if (fail_record) fail(700);
    live = true;
  }
  bool query() const {
    if (fail_query) fail(710);
    if (!ready) last_error = 600;  // cudaErrorNotReady, as cudaEventQuery leaves it
    return ready;
  }
  float elapsed_ms(const FakeEvent&) const {
    if (fail_elapsed) fail(720);
    return elapsed;
  }
  static void clear_error() { last_error = 0; }
  [[noreturn]] static void fail(int code) {
    last_error = code;
    throw std::runtime_error("fake CUDA error " + std::to_string(code));
  }
  static void reset() {
    last_error = 0;
    fail_record = fail_query = fail_elapsed = false;
    ready = true;
    created = 0;
  }
};

class PhaseClockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FakeEvent::reset();
    clock.set_device(3);
  }
  void step(Phase p) {
    clock.begin(p, 0);
    clock.end(p);
  }
  PhaseClock<FakeEvent> clock;
  uint64_t ns[xlaunch::profile::kPhases] = {};
  std::function<void(Phase, uint64_t, uint64_t)> add = [this](Phase p, uint64_t, uint64_t d) { ns[p] += d; };
};

TEST_F(PhaseClockTest, CompletedPhasesAreTimedAndTheirEventsReused) {
  for (int k = 0; k < 100; ++k) {
    step(xlaunch::profile::kForward);
    step(xlaunch::profile::kBackward);
    clock.collect(add);
  }
  EXPECT_EQ(ns[xlaunch::profile::kForward], 100 * 2500000u);
  EXPECT_EQ(ns[xlaunch::profile::kBackward], 100 * 2500000u);
  EXPECT_EQ(clock.pending(), 0u);
  EXPECT_LE(FakeEvent::created, 4 + 2) << "events are reused, not created per phase";
  EXPECT_EQ(FakeEvent::last_error, 0);
}

TEST_F(PhaseClockTest, NotReadyLeavesNoErrorAndThePendingQueueIsBounded) {
  FakeEvent::ready = false;
  for (int k = 0; k < 3000; ++k) {
    step(xlaunch::profile::kForward);
    clock.collect(add);
    ASSERT_EQ(FakeEvent::last_error, 0) << "after step " << k << ": 'not ready' left as the last error";
  }
  EXPECT_EQ(clock.pending(), PhaseClock<FakeEvent>::kMaxPending);
  EXPECT_EQ(ns[xlaunch::profile::kForward], 0u);
  FakeEvent::ready = true;
  clock.collect(add);
  EXPECT_EQ(clock.pending(), 0u);
  EXPECT_EQ(ns[xlaunch::profile::kForward], PhaseClock<FakeEvent>::kMaxPending * 2500000u);
}

TEST_F(PhaseClockTest, EveryToleratedFailureIsCleared) {
  FakeEvent::fail_record = true;
  step(xlaunch::profile::kForward);
  EXPECT_EQ(FakeEvent::last_error, 0) << "a failed record";
  EXPECT_EQ(clock.pending(), 0u);
  FakeEvent::fail_record = false;
  step(xlaunch::profile::kForward);
  FakeEvent::fail_elapsed = true;
  clock.collect(add);
  EXPECT_EQ(FakeEvent::last_error, 0) << "a failed elapsed time";
  EXPECT_EQ(clock.pending(), 0u);
  FakeEvent::fail_elapsed = false;
  step(xlaunch::profile::kForward);
  FakeEvent::fail_query = true;
  clock.collect(add);
  EXPECT_EQ(FakeEvent::last_error, 0) << "a failed query";
  EXPECT_EQ(clock.pending(), 0u) << "a pair whose query fails is dropped, not kept forever";
  EXPECT_EQ(ns[xlaunch::profile::kForward], 0u);
}

TEST_F(PhaseClockTest, NestedPhasesOfOneKindAreTimedOnce) {
  clock.begin(xlaunch::profile::kForward, 0);
  clock.begin(xlaunch::profile::kForward, 0);
  clock.end(xlaunch::profile::kForward);
  EXPECT_EQ(clock.pending(), 0u);
  clock.end(xlaunch::profile::kForward);
  EXPECT_EQ(clock.pending(), 1u);
  clock.set_device(-1);
  step(xlaunch::profile::kForward);
  EXPECT_EQ(clock.pending(), 0u) << "no device: nothing recorded";
}

struct DoneFlag {
  bool done = false;
  bool query() const { return done; }
};

TEST(PendingCollectives, TenThousandCompletedCollectivesHoldNoGrowingQueue) {
  xlaunch::PendingCollectives<DoneFlag> pending;
  const xlaunch::watch::Board& board = *xlaunch::watch::private_board();
  const uint64_t finished_before = board.completed.load();
  for (int k = 0; k < 10000; ++k) {
    const uint64_t seq = xlaunch::watch::issued("allreduce", "float32", 4, 4);
    auto ev = std::make_shared<DoneFlag>();
    pending.add(seq, ev);
    ev->done = true;  // the device finished it; nobody polls (no watchdog thread)
    ASSERT_LE(pending.in_flight(), 1u) << "after " << k + 1 << " collectives";
  }
  pending.release_completed();
  EXPECT_EQ(pending.in_flight(), 0u);
  EXPECT_EQ(board.completed.load() - finished_before, 10000u) << "each one logged finished on the board";
}

TEST(PendingCollectives, InFlightUntilTheirEventsCompleteInIssueOrder) {
  xlaunch::PendingCollectives<DoneFlag> pending;
  std::vector<std::shared_ptr<DoneFlag>> evs;
  for (int k = 0; k < 3; ++k) {
    evs.push_back(std::make_shared<DoneFlag>());
    pending.add(xlaunch::watch::issued("broadcast", "float32", 1, 4), evs.back());
  }
  evs[1]->done = evs[2]->done = true;
  pending.release_completed();
  EXPECT_EQ(pending.in_flight(), 3u) << "the oldest is still running: teardown must abort, not destroy";
  evs[0]->done = true;
  pending.release_completed();
  EXPECT_EQ(pending.in_flight(), 0u);
}

// The NCCL communicator's events (EventPool): reused once their holders drop them, never handed
// out twice while held, and destroyed when dropped after the pool is gone.
struct CountedEvent {
  static inline int alive = 0;
  CountedEvent() { ++alive; }
  ~CountedEvent() { --alive; }
};

TEST(EventPool, ReusesEventsOnceDroppedAndNeverTwiceWhileHeld) {
  auto pool = std::make_shared<xlaunch::EventPool<CountedEvent>>();
  std::vector<std::shared_ptr<CountedEvent>> held;
  for (int k = 0; k < 3; ++k) held.push_back(pool->acquire());
  EXPECT_EQ(pool->made(), 3u);
  EXPECT_NE(held[0].get(), held[1].get());
  EXPECT_NE(held[1].get(), held[2].get());
  CountedEvent* first = held[0].get();
  held.erase(held.begin());  // the collective finished and its Work handle was dropped
  EXPECT_EQ(pool->idle(), 1u);
  const auto again = pool->acquire();
  EXPECT_EQ(again.get(), first) << "a dropped event is reused";
  EXPECT_EQ(pool->made(), 3u);
  const auto fresh = pool->acquire();
  EXPECT_EQ(pool->made(), 4u) << "none idle: a new one";
  for (int k = 0; k < 1000; ++k) pool->acquire();  // one collective after another
  EXPECT_EQ(pool->made(), 5u) << "a thousand collectives in turn use one event";
  EXPECT_EQ(CountedEvent::alive, 5);
  pool.reset();  // the communicator is gone; its Work handles outlive it
  EXPECT_EQ(CountedEvent::alive, 4) << "the idle one went with the pool";
  held.clear();
  EXPECT_EQ(CountedEvent::alive, 2);
}

TEST(BoolReduce, InProcessRanks) {
  xlaunch::test::run_ranks(3, [](std::shared_ptr<xlaunch::InProcessCommunicator> c) {
    xlaunch::test::expect_bools_reduce_as_pytorch(*c);
  });
  xlaunch::test::run_ranks(1, [](std::shared_ptr<xlaunch::InProcessCommunicator> c) {
    at::Tensor t = at::ones({2}, at::kBool);
    EXPECT_THROW(c->allreduce(t, xlaunch::ReduceOp::Avg), xlaunch::UsageError) << "refused in a world of one too";
  });
}

// Two ranks' worth of communicator: records where each reduced tensor lives.
class DeviceRecordingComm final : public xlaunch::Communicator {
 public:
  std::vector<at::Device> seen;
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string name() const override { return "recording"; }
  std::shared_ptr<xlaunch::Work> allreduce_async(at::Tensor t, xlaunch::ReduceOp) override {
    seen.push_back(t.device());
    return xlaunch::completed_work();
  }
  std::shared_ptr<xlaunch::Work> broadcast_async(at::Tensor, int) override { return xlaunch::completed_work(); }
  std::shared_ptr<xlaunch::Work> allgather_async(at::Tensor, at::Tensor) override { return xlaunch::completed_work(); }
  std::shared_ptr<xlaunch::Work> barrier_async() override { return xlaunch::completed_work(); }
};

TEST(GradScalerFoundInf, WithoutGradientsItLivesOnTheParametersDevice) {
  // The meta device stands in for a GPU: parameters there, no gradient anywhere.
  at::Tensor p = at::empty({8}, at::TensorOptions().device(at::kMeta)).requires_grad_();
  torch::optim::SGD opt({p}, torch::optim::SGDOptions(0.1));
  auto comm = std::make_shared<DeviceRecordingComm>();
  xlaunch::GradScaler scaler({}, comm);
  scaler.unscale_(opt);
  ASSERT_EQ(comm->seen.size(), 1u);
  EXPECT_EQ(comm->seen.front(), at::Device(at::kMeta)) << "found_inf went to the communicator on "
                                                        << comm->seen.front().str();
}

// ---- on a GPU (scripts/gpu/run.sh) ----

void skip_without_gpu() {
  if (!XLAUNCH_HAVE_CUDA) GTEST_SKIP() << "this build has no CUDA (XLAUNCH_WITH_CUDA)";
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device here (torch::cuda::is_available() is false)";
}

TEST(CudaDevicePaths, TheAcceleratorMakesItsGpuCurrent) {
  skip_without_gpu();
  if (IsSkipped()) return;
#if XLAUNCH_HAVE_CUDA
  const int last = static_cast<int>(torch::cuda::device_count()) - 1;
  xlaunch::AcceleratorOptions o;
  o.gpu_ids = std::to_string(last);  // the last GPU: not the default device 0 where there are several
  xlaunch::Accelerator acc(o);
  ASSERT_TRUE(acc.device().is_cuda());
  EXPECT_EQ(acc.device().index(), last);
  EXPECT_EQ(c10::cuda::current_device(), last);
  int raw = -1;
  ASSERT_EQ(cudaGetDevice(&raw), cudaSuccess);
  EXPECT_EQ(raw, last) << "raw CUDA calls land on the rank's GPU";
  EXPECT_EQ(at::zeros({1}, at::TensorOptions().device(at::kCUDA)).device().index(), last)
      << "torch::kCUDA without an index means the rank's GPU";
#endif
}

TEST(CudaDevicePaths, TheStepClockLeavesNoCudaErrorBehind) {
  skip_without_gpu();
  if (IsSkipped()) return;
#if XLAUNCH_HAVE_CUDA
  namespace dev = xlaunch::profile::device;
  const int last = static_cast<int>(torch::cuda::device_count()) - 1;
  c10::cuda::set_device(0);  // the thread's current device is not the clock's where there are several
  dev::set_device(last);
  const auto opts = at::TensorOptions().device(at::kCUDA, last);
  at::Tensor a = at::ones({4096, 4096}, opts);
  (void)cudaGetLastError();
  uint64_t ns[xlaunch::profile::kPhases] = {};
  for (int k = 0; k < 20; ++k) {
    dev::begin(xlaunch::profile::kForward, 0);
    const at::Tensor b = at::matmul(a, a);  // long enough that the end event is not ready at once
    dev::end(xlaunch::profile::kForward);
    dev::collect(ns);  // queries "not ready" events: the error must not stay
    ASSERT_EQ(cudaPeekAtLastError(), cudaSuccess) << "after step " << k;
  }
  const at::Tensor c = at::matmul(a, a);  // a launch check of ATen's, after the clock's queries
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  dev::collect(ns);
  EXPECT_GT(ns[xlaunch::profile::kForward], 0u) << "the device time of the phases was measured";
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
  dev::set_device(-1);
#endif
}

}  // namespace
