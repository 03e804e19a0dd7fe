// Host-device syncs counted per step (runtime/src/profile/sync_count.h) without a GPU: c10's
// sync debug warning is made by hand (the text c10 raises) and fed through the counter, as c10
// feeds it on a GPU; the site description is read from literal backtraces of c10's format.
#include <gtest/gtest.h>

#include <c10/util/Exception.h>

#include <string>
#include <thread>
#include <vector>

#include "profile/sync_count.h"

namespace syncs = xlaunch::profile::syncs;
using xlaunch::profile::SyncStats;

namespace {

c10::Warning warning(const std::string& msg) {
  return c10::Warning(c10::UserWarning(), c10::SourceLocation{__func__, __FILE__, __LINE__}, msg, false);
}

c10::Warning sync_warning() { return warning(syncs::kSyncWarningText); }

struct Recorder : c10::WarningHandler {
  std::vector<std::string> seen;
  void process(const c10::Warning& w) override { seen.push_back(w.msg()); }
};

// What c10::get_backtrace gives for `.item()` on a CUDA tensor in a program without exported symbols.
const char* kItemBacktrace =
    "frame #0: xlaunch::profile::syncs::SyncCounter::record(xlaunch::profile::SyncSite&, c10::Warning const&, "
    "unsigned long) + 0x4c (0x7f0000001000 in /opt/x/lib/libxlaunch.so)\n"
    "frame #1: xlaunch::profile::syncs::SyncCounter::process(c10::Warning const&) + 0x90 (0x7f0000002000 in "
    "/opt/x/lib/libxlaunch.so)\n"
    "frame #2: c10::warn(c10::Warning const&) + 0x21 (0x7f0000003000 in /site/torch/lib/libc10.so)\n"
    "frame #3: c10::cuda::warn_or_error_on_sync() + 0x6e (0x7f0000004000 in /site/torch/lib/libc10_cuda.so)\n"
    "frame #4: at::native::_local_scalar_dense_cuda(at::Tensor const&) + 0x1f1 (0x7f0000005000 in "
    "/site/torch/lib/libtorch_cuda.so)\n"
    "frame #5: at::_ops::_local_scalar_dense::call(at::Tensor const&) + 0x1a0 (0x7f0000006000 in "
    "/site/torch/lib/libtorch_cpu.so)\n"
    "frame #6: at::native::item(at::Tensor const&) + 0x42 (0x7f0000007000 in /site/torch/lib/libtorch_cpu.so)\n"
    "frame #7: at::_ops::item::call(at::Tensor const&) + 0x1a0 (0x7f0000008000 in /site/torch/lib/libtorch_cpu.so)\n"
    "frame #8: <unknown function> + 0x1a2b (0x5600000001a2b in /home/u/train)\n"
    "frame #9: __libc_start_main + 0x85 (0x7f0000009000 in /lib/x86_64-linux-gnu/libc.so.6)\n";

}  // namespace

TEST(SyncSite, NamesTheOutermostAtenOperatorAndItsCaller) {
  EXPECT_EQ(syncs::describe_sync_site(kItemBacktrace), "at::_ops::item::call called from train+0x1a2b");
}

TEST(SyncSite, AnExportedCallerIsNamedWithItsModuleAndWithoutArguments) {
  const std::string bt =
      "frame #0: c10::warn(c10::Warning const&) + 0x21 (0x7f01 in /t/libc10.so)\n"
      "frame #1: c10::cuda::device_synchronize() + 0x30 (0x7f02 in /t/libc10_cuda.so)\n"
      "frame #2: xlaunch::(anonymous namespace)::wait_all(std::vector<int, std::allocator<int> > const&) + 0x10 "
      "(0x7f03 in /x/libxlaunch.so)\n";
  EXPECT_EQ(syncs::describe_sync_site(bt),
            "c10::cuda::device_synchronize called from xlaunch::(anonymous namespace)::wait_all (in libxlaunch.so)");
}

TEST(SyncSite, TemplateArgumentsStayAndNoLibTorchFrameGivesNothing) {
  const std::string bt =
      "frame #0: at::Tensor::item<float>() const + 0x5 (0x7f01 in /t/libtorch_cpu.so)\n"
      "frame #1: main + 0x2 (0x5601 in /home/u/train)\n";
  EXPECT_EQ(syncs::describe_sync_site(bt), "at::Tensor::item<float> called from main (in train)");
  EXPECT_EQ(syncs::describe_sync_site("frame #0: main + 0x2 (0x5601 in /home/u/train)\n"), "");
  EXPECT_EQ(syncs::describe_sync_site("not a backtrace"), "");
}

TEST(SyncCounter, CountsSyncWarningsPerStepAndPassesOthersOn) {
  SyncStats stats;
  Recorder next;
  syncs::SyncCounter counter(&stats, &next, /*announce=*/false);
  // Step 1: two syncs and one other warning; step 2: none; step 3: one.
  counter.process(sync_warning());
  counter.process(warning("an unrelated warning"));
  counter.process(sync_warning());
  counter.step_done();
  counter.step_done();
  counter.process(sync_warning());
  counter.step_done();
  EXPECT_EQ(next.seen, std::vector<std::string>{"an unrelated warning"});
  EXPECT_EQ(stats.steps, 3u);
  EXPECT_EQ(stats.syncs, 3u);
  EXPECT_EQ(stats.per_step[0], 2u);
  EXPECT_EQ(stats.per_step[1], 0u);
  EXPECT_EQ(stats.per_step[2], 1u);
  EXPECT_EQ(stats.version.load() % 2, 0u) << "the sequence lock is left even (consistent)";
  // A warning made by hand has no LibTorch frame: the site is where it was raised.
  EXPECT_EQ(stats.first.step, 1u);
  EXPECT_NE(stats.first.text().find("sync_count_test.cpp"), std::string::npos) << stats.first.text();
  EXPECT_EQ(stats.first_after_warmup.step, 0u) << "no sync after the warm-up yet";
}

TEST(SyncCounter, RecordsTheFirstSyncAfterTheWarmUpAndTheCountAtTheWarmUp) {
  SyncStats stats;
  syncs::SyncCounter counter(&stats, nullptr, /*announce=*/false);
  const uint64_t warmup = xlaunch::profile::kWarmupSteps;
  for (uint64_t step = 1; step <= warmup + 5; ++step) {
    if (step == 2 || step > warmup + 2) counter.process(sync_warning());
    counter.step_done();
  }
  EXPECT_EQ(stats.first.step, 2u);
  EXPECT_EQ(stats.first_after_warmup.step, warmup + 3);
  EXPECT_EQ(stats.syncs_at_warmup, 1u);
  EXPECT_EQ(stats.syncs, 4u);
}

// Through c10's own path: TORCH_WARN on this thread reaches the handler installed on it.
TEST(SyncCounter, TakesC10WarningsOfItsThread) {
  SyncStats stats;
  syncs::SyncCounter counter(&stats, c10::WarningUtils::get_warning_handler(), false);
  {
    c10::WarningUtils::WarningHandlerGuard guard(&counter);
    TORCH_WARN(syncs::kSyncWarningText);
    TORCH_WARN(syncs::kSyncWarningText);
  }
  TORCH_WARN("after the guard: not counted (printed by c10)");
  counter.step_done();
  EXPECT_EQ(stats.per_step[0], 2u);
  EXPECT_FALSE(stats.first.text().empty());
}

// The runtime's own syncs (RuntimeSync) are counted apart, never as the loop's first.
TEST(SyncCounter, SyncsInsideARuntimeScopeAreTheRuntimes) {
  SyncStats stats;
  syncs::SyncCounter counter(&stats, nullptr, /*announce=*/false);
  EXPECT_EQ(syncs::runtime_sync(), nullptr);
  {
    syncs::RuntimeSync scope("the scaler's check");
    counter.process(sync_warning());
  }
  counter.step_done();
  EXPECT_EQ(stats.per_step[0], 0u);
  EXPECT_EQ(stats.runtime_per_step[0], 1u);
  EXPECT_EQ(stats.first.step, 0u) << "the runtime's sync is not the loop's first";
  EXPECT_EQ(stats.runtime_what.step, 1u);
  EXPECT_EQ(stats.runtime_what.text(), "the scaler's check");
  // Step 2: one of the loop's, outside the scope, and the runtime's again (its kind noted once).
  counter.process(sync_warning());
  {
    syncs::RuntimeSync scope("the scaler's check");
    counter.process(sync_warning());
  }
  counter.step_done();
  EXPECT_EQ(stats.per_step[1], 1u);
  EXPECT_EQ(stats.runtime_per_step[1], 1u);
  EXPECT_EQ(stats.first.step, 2u);
  EXPECT_EQ(stats.syncs, 1u);
  EXPECT_EQ(stats.runtime_syncs, 2u);
  EXPECT_EQ(stats.runtime_what.text(), "the scaler's check");
  EXPECT_EQ(stats.version.load() % 2, 0u);
}

TEST(SyncCounter, NestedRuntimeScopesNameTheInnermostAndRestoreTheOuter) {
  SyncStats stats;
  syncs::SyncCounter counter(&stats, nullptr, /*announce=*/false);
  {
    syncs::RuntimeSync outer("outer");
    {
      syncs::RuntimeSync inner("inner");
      EXPECT_STREQ(syncs::runtime_sync(), "inner");
      counter.process(sync_warning());
    }
    EXPECT_STREQ(syncs::runtime_sync(), "outer");
    counter.process(sync_warning());
  }
  EXPECT_EQ(syncs::runtime_sync(), nullptr);
  counter.process(sync_warning());  // after both: the loop's
  counter.step_done();
  EXPECT_EQ(stats.runtime_per_step[0], 2u);
  EXPECT_EQ(stats.per_step[0], 1u);
  EXPECT_EQ(stats.runtime_what.text(), "inner; outer");
}

// The scope is per thread: a sync of another thread is not the runtime's because of this one's.
TEST(SyncCounter, ARuntimeScopeIsThisThreadsOnly) {
  syncs::RuntimeSync scope("here");
  const char* seen = "unset";
  std::thread([&] { seen = syncs::runtime_sync(); }).join();
  EXPECT_EQ(seen, nullptr);
  EXPECT_STREQ(syncs::runtime_sync(), "here");
}

// The runtime's own threads count too (CountedThread, made first thing on each): their syncs are
// the step's, and a recorded site names the thread. A thread without one is not counted.
TEST(SyncCounter, ACountedThreadsSyncsAreTheStepsAndNameTheThread) {
  SyncStats stats;
  syncs::SyncCounter counter(&stats, c10::WarningUtils::get_warning_handler(), false);
  std::thread([&] {
    const syncs::CountedThread counted("the loader's worker thread", &counter);
    TORCH_WARN(syncs::kSyncWarningText);
  }).join();
  std::thread([&] { TORCH_WARN(syncs::kSyncWarningText, " (a thread that counts nothing: printed by c10)"); }).join();
  counter.step_done();
  EXPECT_EQ(stats.per_step[0], 1u);
  EXPECT_NE(stats.first.text().find("(on the loader's worker thread)"), std::string::npos) << stats.first.text();
  // Without a counter (counting off) it does nothing: the thread's handler stays.
  std::thread([&] {
    c10::WarningHandler* before = c10::WarningUtils::get_warning_handler();
    { const syncs::CountedThread off("nothing", nullptr); EXPECT_EQ(c10::WarningUtils::get_warning_handler(), before); }
    { const syncs::CountedThread on("something", &counter); EXPECT_EQ(c10::WarningUtils::get_warning_handler(), &counter); }
    EXPECT_EQ(c10::WarningUtils::get_warning_handler(), before) << "the thread's handler is given back";
  }).join();
}

// Many threads counting at once while the training thread ends steps: every sync counted once,
// in one step or the next, and the stats' sequence lock even at the end. (Whether two writers ever
// overlap depends on the scheduling, so this cannot show the lock is needed; it shows that with it
// nothing is lost.)
TEST(SyncCounter, ThreadsCountingAtOnceLoseNothing) {
  SyncStats stats;
  syncs::SyncCounter counter(&stats, nullptr, /*announce=*/false);
  constexpr int kThreads = 4, kEach = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      const syncs::CountedThread counted("a worker", &counter);
      for (int i = 0; i < kEach; ++i) counter.process(sync_warning());
    });
  for (int s = 0; s < 50; ++s) counter.step_done();
  for (auto& t : threads) t.join();
  counter.step_done();
  EXPECT_EQ(stats.syncs, static_cast<uint64_t>(kThreads * kEach));
  EXPECT_EQ(stats.version.load() % 2, 0u);
  EXPECT_GE(stats.first.step, 1u);
  EXPECT_NE(stats.first.text().find("(on a worker)"), std::string::npos) << stats.first.text();
}
