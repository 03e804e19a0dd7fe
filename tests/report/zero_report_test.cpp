// The report's ZeRO line (docs/performance.md) from stats made by hand: the optimizer state per
// rank and the bytes reduce-scattered and gathered per step, in the text, report.json and its
// absence at stage 0; and a stats file of the format before (no ZeRO figures) still reads.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "observe/report.h"
#include "scratch_dir.h"
#include "xlaunch/status/step_stats.h"

using namespace xlaunch::launcher;
using xlaunch::profile::RankStats;

namespace {

// `steps` steps of 10 ms; at `stage` (> 0), each reduce-scattering `scattered` bytes and gathering
// `gathered` bytes except the last `skipped` (steps the GradScaler skipped gather nothing).
std::optional<RankStats> stats(int rank, int stage, uint64_t state, uint64_t scattered, uint64_t gathered,
                               uint64_t steps = 60, uint64_t skipped = 0) {
  RankStats s;
  s.magic = xlaunch::profile::kStatsMagic;
  s.rank = rank;
  for (uint64_t i = 0; i < steps; ++i) {
    s.ring[i].phase_ns[xlaunch::profile::kForward] = 10000000;
    s.ring[i].end_ns = (i + 1) * 10000000;
    s.total.phase_ns[xlaunch::profile::kForward] += 10000000;
    ++s.total.steps;
    if (s.total.steps == 10) s.at_warmup = s.total;
  }
  if (stage > 0) s.zero = {stage, 0, steps, scattered * steps, gathered * (steps - skipped), state};
  return s;
}

std::string text_of(const JobReport& r) { return format_report(r); }

}  // namespace

TEST(ZeroReport, TheLineGivesTheStatePerRankAndTheBytesPerStep) {
  const JobReport r = make_report({stats(0, 2, 12345678, 45600000, 45600000), stats(1, 2, 12345000, 45600000, 45600000)}, {});
  EXPECT_EQ(zero_line(r), "ZeRO stage 2: optimizer state 12.3 MB per rank; per step 45.6 MB reduce-scattered, 45.6 MB gathered");
  EXPECT_NE(text_of(r).find("\nxlaunch: ZeRO stage 2: optimizer state 12.3 MB per rank;"), std::string::npos) << text_of(r);

  const auto j = nlohmann::json::parse(report_json(r));
  EXPECT_EQ(j["zero"], zero_line(r));
  const auto& z = j["ranks"][1]["zero"];
  EXPECT_EQ(z["stage"], 2);
  EXPECT_EQ(z["optimizer_state_bytes"], 12345000.0);
  EXPECT_EQ(z["reduce_scattered_bytes_per_step"], 45600000.0);
  EXPECT_EQ(z["gathered_bytes_per_step"], 45600000.0);
}

TEST(ZeroReport, RanksThatDifferShowTheirRangeAndSmallFiguresKeepTheirDigits) {
  // A bucket of 6751 elements on 2 ranks: shards of 3376 and 3375 elements of AdamW's two moments.
  const JobReport r = make_report({stats(0, 2, 27008, 27008, 27008), stats(1, 2, 27000, 27008, 27008)}, {});
  EXPECT_EQ(zero_line(r), "ZeRO stage 2: optimizer state 0.027 MB per rank; per step 0.027 MB reduce-scattered, 0.027 MB gathered");
  const JobReport wide = make_report({stats(0, 2, 12345678, 1000000, 1000000), stats(1, 2, 12400000, 1000000, 1000000)}, {});
  EXPECT_EQ(zero_line(wide), "ZeRO stage 2: optimizer state 12.3-12.4 MB per rank; per step 1.0 MB reduce-scattered, 1.0 MB gathered");
}

TEST(ZeroReport, SkippedStepsGatherNothing) {
  // 6 of 60 steps skipped (fp16 overflow): 54 gathers over 60 steps.
  const JobReport r = make_report({stats(0, 2, 8000000, 10000000, 10000000, 60, 6)}, {});
  EXPECT_DOUBLE_EQ(r.ranks[0].gathered_bytes_per_step, 9000000);
  EXPECT_DOUBLE_EQ(r.ranks[0].reduce_scattered_bytes_per_step, 10000000);
}

TEST(ZeroReport, StageOneAllreducesTheGradients) {
  const JobReport r = make_report({stats(0, 1, 8000000, 0, 16000000), stats(1, 1, 8000000, 0, 16000000)}, {});
  EXPECT_EQ(zero_line(r),
            "ZeRO stage 1: optimizer state 8.0 MB per rank; per step 16.0 MB gathered (the gradients are allreduced whole at stage 1)");
}

TEST(ZeroReport, StageZeroHasNoLine) {
  const JobReport r = make_report({stats(0, 0, 0, 0, 0), std::nullopt}, {});
  EXPECT_EQ(zero_line(r), "");
  EXPECT_EQ(text_of(r).find("ZeRO"), std::string::npos) << text_of(r);
  const auto j = nlohmann::json::parse(report_json(r));
  EXPECT_FALSE(j.contains("zero"));
  EXPECT_FALSE(j["ranks"][0].contains("zero"));
}

// What a runtime of format 3 leaves (before the ZeRO figures): read whole, with no ZeRO line.
TEST(ZeroReport, AStatsFileOfFormatThreeIsReadWithoutZeroFigures) {
  xlaunch::test::ScratchDir dir;
  auto st = std::make_unique<RankStats>(*stats(0, 2, 1, 1, 1, 30));
  st->magic = xlaunch::profile::kStatsMagicV3;
  const std::string path = dir.path + "/stats-0";
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(write(fd, reinterpret_cast<const char*>(st.get()), xlaunch::profile::kStatsV3Bytes),
            static_cast<ssize_t>(xlaunch::profile::kStatsV3Bytes));
  close(fd);
  const std::optional<RankStats> read = xlaunch::status::read_stats_file(dir.path, 0);
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->total.steps, 30u);
  EXPECT_EQ(read->zero.stage, 0) << "format 3 has no ZeRO figures: they stay empty";
  EXPECT_EQ(zero_line(make_report({read}, {})), "");

  // The same file with the current format's magic but format 3's size: neither format.
  st->magic = xlaunch::profile::kStatsMagic;
  unlink(path.c_str());
  const int fd2 = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd2, 0);
  ASSERT_EQ(write(fd2, reinterpret_cast<const char*>(st.get()), xlaunch::profile::kStatsV3Bytes),
            static_cast<ssize_t>(xlaunch::profile::kStatsV3Bytes));
  close(fd2);
  EXPECT_FALSE(xlaunch::status::read_stats_file(dir.path, 0).has_value());
}
