// The report's arithmetic and its advice rules on stats made by hand: each rule fires on the
// measurement it names, and a balanced job gets no advice (docs/performance.md).
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "observe/report.h"

using namespace xlaunch::launcher;
using xlaunch::profile::kPhases;
using xlaunch::profile::RankStats;

namespace {

enum { D, F, B, C, O, X };

// `steps` steps of rank r, each with these milliseconds per phase and 32 samples.
std::optional<RankStats> stats(int rank, uint64_t steps, std::vector<double> ms, int local_rank = -1) {
  RankStats s;
  s.magic = xlaunch::profile::kStatsMagic;
  s.rank = rank;
  s.local_rank = local_rank < 0 ? rank : local_rank;
  std::snprintf(s.host, sizeof s.host, "host%d", rank);
  for (uint64_t i = 0; i < steps; ++i) {
    auto& rec = s.ring[i % xlaunch::profile::kRingSteps];
    for (int p = 0; p < kPhases; ++p) rec.phase_ns[p] = static_cast<uint64_t>(ms[p] * 1e6);
    rec.samples = 32;
    rec.cpu_ns = (i + 1) * 1000000;  // 1 ms of CPU per step
    rec.end_ns = (i + 1) * 1000000000ull;  // step i ends at i + 1 s
    for (int p = 0; p < kPhases; ++p) s.total.phase_ns[p] += rec.phase_ns[p];
    ++s.total.steps;
    s.total.samples += 32;
    s.total.collectives += 3;
    s.total.bytes += 4000000;
    if (s.total.steps == 10) s.at_warmup = s.total;
  }
  return s;
}

JobReport report_of(std::vector<std::optional<RankStats>> all, std::vector<GpuUse> gpus = {}) {
  JobReport r = make_report(all, gpus);
  r.advice = advise(r, xlaunch::config::LaunchConfig{});
  return r;
}

bool any_has(const std::vector<std::string>& v, const std::string& part) {
  for (const auto& s : v)
    if (s.find(part) != std::string::npos) return true;
  return false;
}

const std::vector<double> kBalanced = {0.2, 3, 5, 0.5, 0.8, 0.5};  // 10 ms per step

}  // namespace

TEST(Report, TheWindowSkipsTheWarmupAndThePhasesAddUp) {
  const JobReport r = report_of({stats(0, 60, kBalanced), stats(1, 60, kBalanced)});
  EXPECT_EQ(r.first_step, 11u);
  EXPECT_EQ(r.last_step, 60u);
  ASSERT_EQ(r.ranks.size(), 2u);
  EXPECT_EQ(r.ranks[0].steps, 50u);
  EXPECT_NEAR(r.ranks[0].steps_per_s, 100, 0.01);
  EXPECT_NEAR(r.ranks[0].samples_per_s, 3200, 0.1);
  EXPECT_NEAR(r.ranks[0].phase_pct[F], 30, 1e-6);
  double sum = 0;
  for (double p : r.ranks[1].phase_pct) sum += p;
  EXPECT_NEAR(sum, 100, 1e-6);
  EXPECT_NEAR(r.ranks[0].cpu_pct, 10, 1e-6);  // 1 ms of CPU in 10 ms
  EXPECT_NEAR(r.ranks[0].collectives_per_step, 3, 1e-9);
  EXPECT_TRUE(r.advice.empty()) << r.advice[0];
  const std::string text = format_report(r);
  EXPECT_NE(text.find("xlaunch: utilization, steps 11-60 of 60, 2 ranks"), std::string::npos) << text;
  EXPECT_EQ(text.find("advice"), std::string::npos) << text;
}

// The GPU means cover the window: from the end of the warm-up's last step.
TEST(Report, TheWindowStartsWhenTheWarmupEnds) {
  EXPECT_DOUBLE_EQ(window_start_s(*stats(0, 60, kBalanced)), 10.0);
  EXPECT_DOUBLE_EQ(window_start_s(*stats(0, 10, kBalanced)), 2.0);
}

TEST(Report, AShortRunLeavesOutAFifth) {
  const JobReport r = report_of({stats(0, 10, kBalanced)});
  EXPECT_EQ(r.first_step, 3u);
  EXPECT_EQ(r.ranks[0].steps, 8u);
}

TEST(Advice, DataWaitNamesTheLoaderWorkers) {
  const std::vector<double> slow = {6, 3, 5, 0.5, 0.8, 0.5};  // 38% data wait
  const JobReport r = report_of({stats(0, 60, slow), stats(1, 60, slow)});
  ASSERT_EQ(r.advice.size(), 1u);
  EXPECT_TRUE(any_has(r.advice, "data wait is 38.0% of the step on ranks 0, 1")) << r.advice[0];
  EXPECT_TRUE(any_has(r.advice, "loader.num_workers (now 2")) << r.advice[0];
}

TEST(Advice, CommunicationWaitNamesBucketsAndAccumulation) {
  const std::vector<double> comm = {0.2, 3, 5, 4, 0.8, 0.5};  // 29.6% comm wait on both
  const JobReport r = report_of({stats(0, 60, comm), stats(1, 60, comm)});
  ASSERT_EQ(r.advice.size(), 1u);
  EXPECT_TRUE(any_has(r.advice, "communication wait is 29.6% of the step on ranks 0, 1")) << r.advice[0];
  EXPECT_TRUE(any_has(r.advice, "ddp.bucket_cap_mb (now 25)")) << r.advice[0];
  EXPECT_TRUE(any_has(r.advice, "gradient_accumulation_steps (now 1)")) << r.advice[0];
  EXPECT_FALSE(any_has(r.advice, "comm_hook")) << "one machine: no link to spare";
  xlaunch::config::LaunchConfig two;
  two.num_machines = 2;
  JobReport across = make_report({stats(0, 60, comm), stats(1, 60, comm)}, {});
  EXPECT_TRUE(any_has(advise(across, two), "ddp.comm_hook bf16")) << advise(across, two)[0];
  two.ddp.comm_hook = "bf16";
  EXPECT_FALSE(any_has(advise(across, two), "ddp.comm_hook bf16"));
}

TEST(Advice, TheStragglerIsNamed) {
  // Rank 2 works 5 ms more per step; the others wait for it (comm wait), so every wall is equal.
  const std::vector<double> waits = {0.2, 3, 5, 5.5, 0.8, 0.5}, slow = {0.2, 3, 10, 0.5, 0.8, 0.5};
  const JobReport r = report_of({stats(0, 60, waits), stats(1, 60, waits), stats(2, 60, slow)});
  EXPECT_TRUE(any_has(r.advice, "rank 2 (host2) is a straggler")) << (r.advice.empty() ? "" : r.advice[0]);
  EXPECT_FALSE(any_has(r.advice, "rank 0 (host0) is a straggler"));
  EXPECT_FALSE(any_has(r.advice, "communication wait")) << "the others wait for the straggler, not the network";
}

// Rank 0's stats with the GPU it published: on host0, the GPU at bus 3b.
std::optional<RankStats> on_gpu(std::optional<RankStats> s) {
  xlaunch::status::set_gpu_bus_id(&*s, "0000:3b:00.0");
  return s;
}

TEST(Advice, TheGpuRules) {
  GpuUse idle{40, 10, 80, 200, "00000000:3B:00.0", "host0"};
  JobReport r = report_of({on_gpu(stats(0, 60, kBalanced))}, {idle});
  EXPECT_TRUE(any_has(r.advice, "GPU SM use is 40.0% on rank 0 while data wait is low")) << r.advice.size();
  EXPECT_TRUE(any_has(r.advice, "GPU memory use is 10.0 of 80.0 GiB on rank 0")) << r.advice.size();
  EXPECT_NE(format_report(r).find("40%"), std::string::npos);
  GpuUse busy{95, 70, 80, 600, "00000000:3B:00.0", "host0"};
  EXPECT_TRUE(report_of({on_gpu(stats(0, 60, kBalanced))}, {busy}).advice.empty());
}

TEST(Report, AMissingRankIsShownNotInvented) {
  const JobReport r = report_of({stats(0, 60, kBalanced), std::nullopt});
  EXPECT_FALSE(r.ranks[1].present);
  EXPECT_NE(format_report(r).find("its stats are not visible here"), std::string::npos);
  const auto json = nlohmann::json::parse(report_json(r));
  EXPECT_EQ(json["ranks"][1]["present"], false) << json;
}

// Ranks that take turns waiting for each other (jitter, not the network): no communication advice.
TEST(Advice, CommunicationWaitOnOneRankOnlyIsNotTheNetwork) {
  const std::vector<double> waits = {0.2, 3, 5, 2.5, 0.8, 0.5};
  EXPECT_TRUE(report_of({stats(0, 60, waits), stats(1, 60, kBalanced)}).advice.empty());
}

// On CUDA the phases' device time (CUDA events) is shown per step; on CPUs nothing.
TEST(Report, GpuTimePerStepFromCudaEvents) {
  auto s = stats(0, 60, kBalanced);
  EXPECT_EQ(format_report(report_of({s})).find("GPU time per step"), std::string::npos);
  s->total.gpu_ns[F] = 60 * 2000000ull;  // 2 ms per step
  s->at_warmup.gpu_ns[F] = 10 * 2000000ull;
  const JobReport r = report_of({s});
  EXPECT_NEAR(r.ranks[0].gpu_ms_per_step[F], 2.0, 1e-9);
  EXPECT_NE(format_report(r).find("rank 0's GPU time per step (CUDA events): forward 2.00 ms"), std::string::npos)
      << format_report(r);
  const auto json = nlohmann::json::parse(report_json(r));
  EXPECT_EQ(json["ranks"][0]["gpu_ms_per_step"]["data_wait"], 0) << json;
  EXPECT_NEAR(json["ranks"][0]["gpu_ms_per_step"]["forward"].get<double>(), 2.0, 1e-9) << json;
}
