// The report's host-device sync line (launcher/src/observe/syncs.h) from counts made by hand, and
// the whole path without a GPU: syncs::start() (what the Accelerator calls with debug: true on a
// GPU) counting c10's sync warning into syncs-<rank> in a status directory, read back by the
// launcher into the report's text and report.json.
#include <gtest/gtest.h>

#include <c10/util/Exception.h>
#if XLAUNCH_HAVE_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "observe/report.h"
#include "observe/syncs.h"
#include "profile/sync_count.h"
#include "scratch_dir.h"
#include "xlaunch/status/private_files.h"
#include "xlaunch/status/sync_stats.h"

using namespace xlaunch::launcher;
using xlaunch::profile::SyncStats;

namespace {

// `steps` steps with `per_step` syncs each, the first recorded at step 1 ("prepare") and the first
// after the warm-up at step 11 ("the loop").
std::unique_ptr<SyncStats> counts(int rank, uint64_t steps, uint32_t per_step) {
  auto s = std::make_unique<SyncStats>();
  s->magic = xlaunch::profile::kSyncStatsMagic;
  s->rank = rank;
  for (uint64_t i = 0; i < steps; ++i) {
    s->per_step[i % xlaunch::profile::kRingSteps] = per_step;
    s->syncs += per_step;
    if (++s->steps == 10) s->syncs_at_warmup = s->syncs;
  }
  if (per_step > 0) {
    s->first.step = 1;
    std::snprintf(s->first.where, sizeof s->first.where, "prepare");
    s->first_after_warmup.step = 11;
    std::snprintf(s->first_after_warmup.where, sizeof s->first_after_warmup.where, "the loop");
  }
  return s;
}

}  // namespace

TEST(SyncsReport, OnePerStepOverTheWindowWithTheFirstSiteInIt) {
  const RankSyncs r = summarize_syncs(*counts(0, 60, 1), 10);
  EXPECT_EQ(r.steps, 50u);
  EXPECT_EQ(r.syncs, 50u);
  EXPECT_DOUBLE_EQ(r.per_step, 1.0);
  EXPECT_EQ(r.first_step, 11u);
  EXPECT_EQ(r.first, "the loop");
  const std::string line = syncs_line({r});
  EXPECT_EQ(line.rfind("host-device syncs: 1 per step on rank 0 (first: step 11, the loop); remove it: ", 0), 0u)
      << line;
}

TEST(SyncsReport, WarmUpStepsAreLeftOut) {
  auto s = counts(0, 30, 0);
  s->per_step[0] = 7;  // prepare's syncs, in step 1
  s->syncs = 7;
  s->first.step = 1;
  const RankSyncs r = summarize_syncs(*s, 10);
  EXPECT_EQ(r.syncs, 0u);
  EXPECT_EQ(syncs_line({r}), "host-device syncs: none in the steps after the warm-up on rank 0 (counted with debug: true)");
}

TEST(SyncsReport, AShortRunsWindowAndARunPastTheRing) {
  // 8 steps: the report's warm-up is a fifth (1 step); the run's first sync is in the window.
  auto s = counts(0, 8, 2);
  s->first_after_warmup.step = 0;
  s->first.step = 3;
  const RankSyncs shortrun = summarize_syncs(*s, 1);
  EXPECT_EQ(shortrun.steps, 7u);
  EXPECT_EQ(shortrun.syncs, 14u);
  EXPECT_EQ(shortrun.first_step, 3u);
  // Past the ring: the totals since step kWarmupSteps.
  const uint64_t n = xlaunch::profile::kRingSteps + 100;
  const RankSyncs longrun = summarize_syncs(*counts(0, n, 3), 10);
  EXPECT_EQ(longrun.steps, n - 10);
  EXPECT_DOUBLE_EQ(longrun.per_step, 3.0);
}

TEST(SyncsReport, SeveralRanksTheMostAndTheRange) {
  std::vector<RankSyncs> ranks = {summarize_syncs(*counts(0, 60, 1), 10), summarize_syncs(*counts(1, 60, 2), 10),
                                  summarize_syncs(*counts(2, 60, 2), 10)};
  const std::string line = syncs_line(ranks);
  EXPECT_EQ(line.rfind("host-device syncs: 2 per step on ranks 1, 2 (first: step 11, the loop); 1 to 2 per step over the ranks; "
                            "remove it: ", 0), 0u)
      << line;
  ranks[0] = summarize_syncs(*counts(0, 60, 2), 10);
  EXPECT_EQ(syncs_line(ranks).rfind("host-device syncs: 2 per step on ranks 0-2 (first:", 0), 0u) << syncs_line(ranks);
  EXPECT_EQ(syncs_line({}), "") << "no rank counted: no line";
  EXPECT_EQ(syncs_line({summarize_syncs(*counts(0, 5, 1), 10)}), "") << "no step in the window: no line";
}

TEST(SyncsReport, InTheReportTextAndJson) {
  JobReport r;
  r.world = 1;
  r.syncs = {summarize_syncs(*counts(0, 60, 1), 10)};
  EXPECT_NE(format_report(r).find("xlaunch: host-device syncs: 1 per step on rank 0"), std::string::npos);
  const auto j = nlohmann::json::parse(report_json(r));
  ASSERT_TRUE(j.contains("host_device_syncs"));
  EXPECT_EQ(j["host_device_syncs"][0]["per_step"], 1.0);
  EXPECT_EQ(j["host_device_syncs"][0]["first"], "the loop");
  r.syncs.clear();
  EXPECT_EQ(format_report(r).find("host-device syncs"), std::string::npos);
  EXPECT_FALSE(nlohmann::json::parse(report_json(r)).contains("host_device_syncs"));
}

// The rank's side and the launcher's through a status directory: one sync per step for 30 steps.
TEST(SyncsReport, CountedByTheRankReadByTheLauncher) {
  xlaunch::test::ScratchDir scratch;
  std::string why;
  const std::string dir = xlaunch::files::make_private_dir(scratch.path, "status.", &why);
  ASSERT_FALSE(dir.empty()) << why;
  xlaunch::profile::syncs::SyncCounter* counter = xlaunch::profile::syncs::start(dir, 0);
  ASSERT_NE(counter, nullptr);
#if XLAUNCH_HAVE_CUDA
  EXPECT_EQ(c10::cuda::warning_state().get_sync_debug_mode(), c10::cuda::SyncDebugMode::L_WARN);
#endif
  for (int step = 0; step < 30; ++step) {
    TORCH_WARN(xlaunch::profile::syncs::kSyncWarningText);  // what c10 raises for .item() on a GPU
    xlaunch::profile::syncs::step_done();
  }
  const std::vector<RankSyncs> read = read_syncs(dir, 2, 10);  // rank 1 did not count: left out
  ASSERT_EQ(read.size(), 1u);
  EXPECT_EQ(read[0].steps, 20u);
  EXPECT_EQ(read[0].syncs, 20u);
  EXPECT_EQ(read[0].first_step, 11u);
  EXPECT_FALSE(read[0].first.empty());
  EXPECT_EQ(syncs_line(read).rfind("host-device syncs: 1 per step on rank 0 (first: step 11, ", 0), 0u) << syncs_line(read);
  xlaunch::files::remove_private_dir(dir);
}

namespace {

// `counts` plus the runtime's `runtime` syncs per step, of the kinds `what`.
std::unique_ptr<SyncStats> with_runtime(std::unique_ptr<SyncStats> s, uint32_t runtime, const char* what) {
  for (uint64_t i = 0; i < s->steps; ++i) {
    s->runtime_per_step[i % xlaunch::profile::kRingSteps] = runtime;
    s->runtime_syncs += runtime;
    if (i + 1 == 10) s->runtime_syncs_at_warmup = s->runtime_syncs;
  }
  s->runtime_what.step = 1;
  std::snprintf(s->runtime_what.where, sizeof s->runtime_what.where, "%s", what);
  return s;
}

}  // namespace

TEST(SyncsReport, OnlyTheRuntimesSyncsAreSaidWhatTheyAreWithNoAdviceToRemoveThem) {
  const RankSyncs r = summarize_syncs(*with_runtime(counts(0, 60, 0), 1, "fp16 check: bf16 needs none"), 10);
  EXPECT_EQ(r.syncs, 0u);
  EXPECT_EQ(r.runtime_syncs, 50u);
  EXPECT_DOUBLE_EQ(r.runtime_per_step, 1.0);
  EXPECT_EQ(syncs_line({r}),
            "host-device syncs: 1 per step on rank 0, all made by xlaunch itself (fp16 check: bf16 needs none); "
            "none by the training loop");
}

TEST(SyncsReport, TheLoopsAndTheRuntimesSaidApart) {
  const RankSyncs r = summarize_syncs(*with_runtime(counts(0, 60, 1), 1, "fp16 check: bf16 needs none"), 10);
  const std::string line = syncs_line({r});
  EXPECT_EQ(line.rfind("host-device syncs: 1 per step on rank 0 (first: step 11, the loop); remove it: ", 0), 0u) << line;
  const std::string tail = "; and 1 per step made by xlaunch itself (fp16 check: bf16 needs none)";
  ASSERT_GT(line.size(), tail.size());
  EXPECT_EQ(line.substr(line.size() - tail.size()), tail) << line;
  // Only the loop's: nothing said of the runtime.
  EXPECT_EQ(syncs_line({summarize_syncs(*counts(0, 60, 1), 10)}).find("xlaunch itself"), std::string::npos);
  // Past the ring the runtime's are counted since the warm-up as the loop's are.
  const uint64_t n = xlaunch::profile::kRingSteps + 100;
  const RankSyncs longrun = summarize_syncs(*with_runtime(counts(0, n, 0), 2, "x"), 10);
  EXPECT_EQ(longrun.runtime_syncs, 2 * (n - 10));
  const auto j = syncs_json({r});
  EXPECT_EQ(j[0]["runtime_per_step"], 1.0);
  EXPECT_EQ(j[0]["runtime_what"], "fp16 check: bf16 needs none");
}

// Through the status file: a sync inside a RuntimeSync reaches the launcher as the runtime's.
TEST(SyncsReport, TheRuntimesSyncsThroughTheStatusFile) {
  xlaunch::test::ScratchDir scratch;
  std::string why;
  const std::string dir = xlaunch::files::make_private_dir(scratch.path, "status.", &why);
  ASSERT_FALSE(dir.empty()) << why;
  SyncStats* stats = xlaunch::status::create_sync_stats_file(dir, 3, &why);
  ASSERT_NE(stats, nullptr) << why;
  xlaunch::profile::syncs::SyncCounter counter(stats, nullptr, /*announce=*/false);
  for (int step = 0; step < 30; ++step) {
    xlaunch::profile::syncs::RuntimeSync scope("the scaler's check");
    counter.process(c10::Warning(c10::UserWarning(), c10::SourceLocation{__func__, __FILE__, __LINE__},
                                 xlaunch::profile::syncs::kSyncWarningText, false));
    counter.step_done();
  }
  const std::vector<RankSyncs> read = read_syncs(dir, 4, 10);
  ASSERT_EQ(read.size(), 1u);
  EXPECT_EQ(read[0].rank, 3);
  EXPECT_EQ(read[0].syncs, 0u);
  EXPECT_EQ(read[0].runtime_syncs, 20u);
  EXPECT_EQ(read[0].runtime_what, "the scaler's check");
  EXPECT_EQ(syncs_line(read), "host-device syncs: 1 per step on rank 3, all made by xlaunch itself (the scaler's check); "
                              "none by the training loop");
  xlaunch::files::remove_private_dir(dir);
}
