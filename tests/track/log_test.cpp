// acc.init_trackers / acc.log on ranks as threads (InProcessCommunicator): only rank 0 writes, a
// reduced call writes the mean, sum or max of what every rank passed (computed here as one
// process would), mismatched names and an unwritable project_dir fail on every rank; and the
// pure parts: the utilization scalars from literal totals, histograms of literal tensors, and
// log_with's spellings.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <atomic>
#include <cmath>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "../runtime/inprocess_ranks.h"
#include "scratch_dir.h"
#include "track/histograms.h"
#include "track/utilization.h"
#include "xlaunch/accelerator.h"

namespace {

using xlaunch::LogReduce;
using xlaunch::track::Scalar;

xlaunch::AcceleratorOptions options(const std::string& project_dir, std::vector<std::string> log_with) {
  xlaunch::AcceleratorOptions o;
  o.cpu = true;
  o.project_dir = project_dir;
  o.log_with = std::move(log_with);
  return o;
}

std::vector<nlohmann::json> jsonl(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

// Rank r passes loss = 1.5 + r * 0.25 + step / 8 (exact in binary) and a rank-specific peak.
double loss_of(int rank, int step) { return 1.5 + rank * 0.25 + step / 8.0; }

TEST(AcceleratorLog, OnlyRankZeroWritesAndReducedValuesAreTheRanksMeanSumAndMax) {
  const xlaunch::test::ScratchDir dir;
  constexpr int kWorld = 3;
  xlaunch::test::run_ranks(kWorld, [&](std::shared_ptr<xlaunch::InProcessCommunicator> comm) {
    xlaunch::Accelerator acc(options(dir.path, {"jsonl"}), comm);
    acc.init_trackers("run", {{"lr", 0.5}});
    EXPECT_TRUE(acc.trackers_active());
    const int r = acc.process_index();
    for (int step = 1; step <= 4; ++step) {
      acc.log({{"loss", loss_of(r, step)}}, step, LogReduce::Mean);
      acc.log({{"loss_sum", loss_of(r, step)}, {"peak", 10.0 * r - step}}, step, LogReduce::Sum);
      acc.log({{"peak", 10.0 * r - step}}, step, LogReduce::Max);
      acc.log({{"own", static_cast<double>(r)}}, step);  // rank 0's only
    }
    acc.end_training();
  });
  const auto rows = jsonl(dir.path + "/run/metrics.jsonl");
  ASSERT_EQ(rows.size(), 16u);
  for (int step = 1; step <= 4; ++step) {
    double mean = 0, sum = 0, peak_sum = 0, peak_max = -INFINITY;
    for (int r = 0; r < kWorld; ++r) {
      mean += loss_of(r, step);
      sum += loss_of(r, step);
      peak_sum += 10.0 * r - step;
      peak_max = std::max(peak_max, 10.0 * r - step);
    }
    mean /= kWorld;
    const auto& m = rows[(step - 1) * 4];
    EXPECT_EQ(m["step"], step);
    EXPECT_EQ(m["loss"].get<double>(), mean);
    const auto& s = rows[(step - 1) * 4 + 1];
    EXPECT_EQ(s["loss_sum"].get<double>(), sum);
    EXPECT_EQ(s["peak"].get<double>(), peak_sum);
    EXPECT_EQ(rows[(step - 1) * 4 + 2]["peak"].get<double>(), peak_max);
    EXPECT_EQ(rows[(step - 1) * 4 + 3]["own"].get<double>(), 0.0);  // rank 0's, never another's
  }
}

TEST(AcceleratorLog, MismatchedNamesInAReducedCallFailOnEveryRank) {
  const xlaunch::test::ScratchDir dir;
  std::atomic<int> refused{0};
  xlaunch::test::run_ranks(2, [&](std::shared_ptr<xlaunch::InProcessCommunicator> comm) {
    xlaunch::Accelerator acc(options(dir.path, {"jsonl"}), comm);
    acc.init_trackers("run");
    const std::string name = acc.process_index() == 0 ? "loss" : "los";
    try {
      acc.log({{name, 1.0}}, 1, LogReduce::Mean);
    } catch (const xlaunch::UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("other names"), std::string::npos) << e.what();
      ++refused;
    }
  });
  EXPECT_EQ(refused, 2);
}

// Whether tracking is on decides collectives: ranks that disagree fail together at init_trackers.
TEST(AcceleratorLog, RanksWithOtherTrackingSettingsFailTogether) {
  const xlaunch::test::ScratchDir dir;
  std::atomic<int> refused{0};
  xlaunch::test::run_ranks(2, [&](std::shared_ptr<xlaunch::InProcessCommunicator> comm) {
    const bool first = comm->rank() == 0;
    xlaunch::Accelerator acc(options(dir.path, first ? std::vector<std::string>{"jsonl"} : std::vector<std::string>{}), comm);
    try {
      acc.init_trackers("run");
    } catch (const xlaunch::UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("rank 1 has 'log_with; "), std::string::npos) << e.what();
      ++refused;
    }
  });
  EXPECT_EQ(refused, 2);
}

// A joined rank (uneven inputs) cannot take part in the user's reduced call: refused up front.
TEST(AcceleratorLog, AReducedCallWithUnevenInputsIsRefusedOnEveryRank) {
  const xlaunch::test::ScratchDir dir;
  std::atomic<int> refused{0};
  xlaunch::test::run_ranks(2, [&](std::shared_ptr<xlaunch::InProcessCommunicator> comm) {
    xlaunch::Accelerator acc(options(dir.path, {"jsonl"}), comm);
    acc.expect_uneven_inputs();
    acc.init_trackers("run");
    acc.log({{"own", 1.0}}, 1);  // not reduced: fine
    try {
      acc.log({{"loss", 1.0}}, 1, LogReduce::Mean);
    } catch (const xlaunch::UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("uneven inputs"), std::string::npos) << e.what();
      ++refused;
    }
  });
  EXPECT_EQ(refused, 2);
}

TEST(AcceleratorLog, AnUnwritableProjectDirIsRefusedOnEveryRankNamingThePath) {
  const xlaunch::test::ScratchDir dir;
  const std::string file = dir.path + "/not_a_dir";
  std::ofstream(file) << "x";
  std::atomic<int> refused{0};
  xlaunch::test::run_ranks(2, [&](std::shared_ptr<xlaunch::InProcessCommunicator> comm) {
    xlaunch::Accelerator acc(options(file, {"tensorboard", "jsonl"}), comm);
    try {
      acc.init_trackers("run");
    } catch (const xlaunch::UsageError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(file + "/run"), std::string::npos) << what;
      EXPECT_NE(what.find("Not a directory"), std::string::npos) << what;
      ++refused;
    }
  });
  EXPECT_EQ(refused, 2);
}

TEST(AcceleratorLog, WithoutLogWithNothingIsWritten) {
  const xlaunch::test::ScratchDir dir;
  xlaunch::Accelerator acc(options(dir.path, {}));
  acc.init_trackers("run");
  EXPECT_FALSE(acc.trackers_active());
  acc.log({{"loss", 1.0}});
  EXPECT_FALSE(std::ifstream(dir.path + "/run/metrics.jsonl").good());
}

TEST(AcceleratorLog, LogWithSpellings) {
  using V = std::vector<std::string>;
  EXPECT_EQ(xlaunch::AcceleratorOptions::split_log_with(""), V{});
  EXPECT_EQ(xlaunch::AcceleratorOptions::split_log_with("tensorboard"), V{"tensorboard"});
  EXPECT_EQ(xlaunch::AcceleratorOptions::split_log_with("jsonl, csv"), (V{"jsonl", "csv"}));
  EXPECT_EQ(xlaunch::AcceleratorOptions::split_log_with("all"), (V{"tensorboard", "jsonl", "csv"}));
  xlaunch::Accelerator acc(options("/tmp", {"wandb"}));
  EXPECT_THROW(acc.init_trackers("run"), xlaunch::UsageError);
  EXPECT_THROW(acc.init_trackers("a/b"), xlaunch::UsageError);
}

double value_of(const std::vector<Scalar>& s, const std::string& tag) {
  for (const auto& x : s)
    if (x.tag == tag) return x.value;
  ADD_FAILURE() << "no " << tag;
  return NAN;
}

TEST(Utilization, ScalarsFromTheRanksIntervals) {
  using namespace xlaunch::track;
  xlaunch::profile::Totals before, a, b;
  before.steps = 10, before.samples = 640, before.wall_ns = 1'000'000'000, before.cpu_ns = 500'000'000;
  a = before;
  a.steps = 60, a.samples = 640 + 50 * 64, a.wall_ns = 3'000'000'000;  // 50 steps in 2 s
  a.cpu_ns = 500'000'000 + 3'000'000'000ull;                          // 1.5 cores
  a.phase_ns[xlaunch::profile::kDataWait] = 500'000'000;                // 25% of the interval
  a.phase_ns[xlaunch::profile::kCommWait] = 200'000'000;                // 10%
  b = before;
  b.steps = 60, b.samples = 640 + 50 * 64, b.wall_ns = 5'000'000'000;   // 50 steps in 4 s
  b.cpu_ns = 500'000'000 + 4'000'000'000ull;                          // 1 core
  b.phase_ns[xlaunch::profile::kDataWait] = 0;
  b.phase_ns[xlaunch::profile::kCommWait] = 2'000'000'000;              // 50%
  const std::vector<RankInterval> ranks = {interval_between(before, a, false, std::nullopt),
                                           interval_between(before, b, false, std::nullopt)};
  const std::vector<Scalar> s = utilization_scalars(ranks);
  EXPECT_DOUBLE_EQ(value_of(s, "xlaunch/steps_per_s"), (25.0 + 12.5) / 2);
  EXPECT_DOUBLE_EQ(value_of(s, "xlaunch/samples_per_s"), 50 * 64 / 2.0 + 50 * 64 / 4.0);
  EXPECT_DOUBLE_EQ(value_of(s, "xlaunch/data_wait"), 0.125);
  EXPECT_DOUBLE_EQ(value_of(s, "xlaunch/data_wait_max"), 0.25);
  EXPECT_DOUBLE_EQ(value_of(s, "xlaunch/comm_wait"), 0.3);
  EXPECT_DOUBLE_EQ(value_of(s, "xlaunch/comm_wait_max"), 0.5);
  EXPECT_DOUBLE_EQ(value_of(s, "xlaunch/cpu_cores"), 1.25);
  for (const auto& x : s) EXPECT_NE(x.tag.rfind("xlaunch/gpu", 0), 0u) << x.tag << " on CPU ranks";
  const auto& tags = xlaunch::track::utilization_tags();  // xlaunch.csv's columns hold every one
  for (const auto& x : s) EXPECT_NE(std::find(tags.begin(), tags.end(), x.tag), tags.end()) << x.tag;

  // GPU ranks: busy time of the phases, and NVML's SM use where it answered.
  xlaunch::profile::Totals g = a;
  g.gpu_ns[xlaunch::profile::kForward] = 1'000'000'000;
  g.gpu_ns[xlaunch::profile::kBackward] = 600'000'000;
  const std::vector<Scalar> gs =
      utilization_scalars({interval_between(before, g, true, 80.0), interval_between(before, g, true, std::nullopt)});
  EXPECT_DOUBLE_EQ(value_of(gs, "xlaunch/gpu_busy"), 0.8);
  EXPECT_DOUBLE_EQ(value_of(gs, "xlaunch/gpu_sm"), 80.0);
  // No step since the last report: nothing to say.
  EXPECT_TRUE(utilization_scalars({interval_between(before, before, false, std::nullopt)}).empty());
}

TEST(Histograms, BucketsCountsAndSumsOfTheFiniteValues) {
  const auto t = torch::tensor({0.0, 1.0, 1.0, 2.0, 3.0, 4.0, std::nan(""), std::numeric_limits<double>::infinity()}, torch::kDouble);
  const auto h = xlaunch::track::histogram_of("w", t, 4);
  EXPECT_EQ(h.tag, "w");
  EXPECT_EQ(h.num, 6);
  EXPECT_EQ(h.min, 0);
  EXPECT_EQ(h.max, 4);
  EXPECT_EQ(h.sum, 11);
  EXPECT_EQ(h.sum_squares, 31);
  EXPECT_EQ(h.bucket_limit, (std::vector<double>{1, 2, 3, 4}));
  EXPECT_EQ(h.bucket, (std::vector<double>{1, 2, 1, 2}));  // histc: [0,1) [1,2) [2,3) [3,4]
  const auto one = xlaunch::track::histogram_of("c", torch::full({5}, 2.5f), 30);
  EXPECT_EQ(one.bucket, std::vector<double>{5});
  EXPECT_EQ(xlaunch::track::histogram_of("n", torch::full({3}, NAN), 30).num, 0);
}

}  // namespace
