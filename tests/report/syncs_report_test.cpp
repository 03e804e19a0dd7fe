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
