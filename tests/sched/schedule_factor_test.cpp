// The named schedules' factors at literal steps, each derived by hand from transformers'
// formulas (optimization.py); their option checks and messages; docs/schedulers.md against the
// table.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <regex>
#include <sstream>

#include "xlaunch/error.h"
#include "xlaunch/lr_scheduler.h"

namespace {

using xlaunch::ScheduleOptions;
using xlaunch::schedule_factor;

ScheduleOptions warmup2_total10() {
  ScheduleOptions o;
  o.warmup_steps = 2;
  o.total_steps = 10;
  return o;
}

TEST(ScheduleFactor, Constant) {
  for (int64_t step : {0, 1, 5, 1000}) EXPECT_EQ(schedule_factor("constant", step, {}), 1.0) << step;
}

TEST(ScheduleFactor, ConstantWithWarmup) {
  ScheduleOptions o;
  o.warmup_steps = 4;
  EXPECT_EQ(schedule_factor("constant_with_warmup", 0, o), 0.0);
  EXPECT_EQ(schedule_factor("constant_with_warmup", 1, o), 0.25);
  EXPECT_EQ(schedule_factor("constant_with_warmup", 3, o), 0.75);
  EXPECT_EQ(schedule_factor("constant_with_warmup", 4, o), 1.0);  // warmup ends: the full lr
  EXPECT_EQ(schedule_factor("constant_with_warmup", 400, o), 1.0);
  EXPECT_EQ(schedule_factor("constant_with_warmup", 0, ScheduleOptions{}), 1.0);  // no warmup
}

TEST(ScheduleFactor, Linear) {
  const ScheduleOptions o = warmup2_total10();
  EXPECT_EQ(schedule_factor("linear", 0, o), 0.0);
  EXPECT_EQ(schedule_factor("linear", 1, o), 0.5);
  EXPECT_EQ(schedule_factor("linear", 2, o), 1.0);    // (10 - 2) / 8
  EXPECT_EQ(schedule_factor("linear", 6, o), 0.5);    // (10 - 6) / 8
  EXPECT_EQ(schedule_factor("linear", 9, o), 0.125);  // (10 - 9) / 8
  EXPECT_EQ(schedule_factor("linear", 10, o), 0.0);
  EXPECT_EQ(schedule_factor("linear", 12, o), 0.0);   // max(0, -2 / 8)
}

TEST(ScheduleFactor, CosineHalfWaveByDefault) {
  const ScheduleOptions o = warmup2_total10();
  EXPECT_EQ(schedule_factor("cosine", 1, o), 0.5);
  EXPECT_EQ(schedule_factor("cosine", 2, o), 1.0);                                 // progress 0: cos 0
  EXPECT_DOUBLE_EQ(schedule_factor("cosine", 4, o), 0.5 * (1 + std::sqrt(0.5)));  // progress 1/4: cos(pi/4)
  EXPECT_DOUBLE_EQ(schedule_factor("cosine", 6, o), 0.5);                         // progress 1/2: cos(pi/2)
  EXPECT_DOUBLE_EQ(schedule_factor("cosine", 10, o), 0.0);                        // progress 1: cos(pi)
  // transformers does not clamp progress: past total_steps the cosine rises again.
  EXPECT_DOUBLE_EQ(schedule_factor("cosine", 14, o), 0.5);  // progress 3/2: cos(3 pi / 2)
}

TEST(ScheduleFactor, CosineWithOneFullWave) {
  ScheduleOptions o = warmup2_total10();
  o.num_cycles = 1;
  EXPECT_DOUBLE_EQ(schedule_factor("cosine", 6, o), 0.0);  // cos(pi)
  EXPECT_DOUBLE_EQ(schedule_factor("cosine", 10, o), 1.0);  // cos(2 pi)
}

TEST(ScheduleFactor, CosineWithRestarts) {
  ScheduleOptions o = warmup2_total10();
  EXPECT_DOUBLE_EQ(schedule_factor("cosine_with_restarts", 6, o), 0.5);  // one cycle by default: cos(pi/2)
  o.num_cycles = 2;
  EXPECT_EQ(schedule_factor("cosine_with_restarts", 1, o), 0.5);
  EXPECT_EQ(schedule_factor("cosine_with_restarts", 2, o), 1.0);
  EXPECT_DOUBLE_EQ(schedule_factor("cosine_with_restarts", 4, o), 0.5);                       // 2 * 1/4 % 1
  EXPECT_DOUBLE_EQ(schedule_factor("cosine_with_restarts", 5, o), 0.5 * (1 - std::sqrt(0.5)));  // cos(3 pi / 4)
  EXPECT_EQ(schedule_factor("cosine_with_restarts", 6, o), 1.0);  // the restart: 2 * 1/2 % 1 = 0
  EXPECT_DOUBLE_EQ(schedule_factor("cosine_with_restarts", 8, o), 0.5);
  EXPECT_EQ(schedule_factor("cosine_with_restarts", 10, o), 0.0);  // progress 1: 0, no restart
  EXPECT_EQ(schedule_factor("cosine_with_restarts", 11, o), 0.0);
}

TEST(ScheduleFactor, Polynomial) {
  ScheduleOptions o = warmup2_total10();
  o.power = 2;
  o.lr_end = 0.01;
  const double lr_init = 0.1;
  EXPECT_EQ(schedule_factor("polynomial", 0, o, lr_init), 0.0);
  EXPECT_EQ(schedule_factor("polynomial", 1, o, lr_init), 0.5);
  EXPECT_DOUBLE_EQ(schedule_factor("polynomial", 2, o, lr_init), 1.0);     // (0.09 * 1 + 0.01) / 0.1
  EXPECT_DOUBLE_EQ(schedule_factor("polynomial", 6, o, lr_init), 0.325);   // (0.09 * 0.5^2 + 0.01) / 0.1
  EXPECT_DOUBLE_EQ(schedule_factor("polynomial", 10, o, lr_init), 0.1);    // lr_end / lr_init
  EXPECT_DOUBLE_EQ(schedule_factor("polynomial", 11, o, lr_init), 0.1);
  o.power = 1;
  EXPECT_DOUBLE_EQ(schedule_factor("polynomial", 6, o, lr_init), 0.55);    // (0.09 * 0.5 + 0.01) / 0.1
}

// The message of `name`'s UsageError with `o`; "" when none is thrown.
std::string error_of(const std::string& name, const ScheduleOptions& o, double lr_init = 1.0, int64_t step = 0) {
  try {
    schedule_factor(name, step, o, lr_init);
  } catch (const xlaunch::UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(ScheduleFactor, UnknownNameListsTheNames) {
  const std::string msg = error_of("cosin", warmup2_total10());
  EXPECT_NE(msg.find("'cosin'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("constant, constant_with_warmup, linear, cosine, cosine_with_restarts, polynomial"),
            std::string::npos) << msg;
  EXPECT_NE(msg.find("adapt"), std::string::npos) << msg;
}

TEST(ScheduleFactor, OptionsOutOfRangeNameTheOptionAndFix) {
  ScheduleOptions o = warmup2_total10();
  o.total_steps = 0;
  EXPECT_NE(error_of("linear", o).find("needs total_steps"), std::string::npos) << error_of("linear", o);
  EXPECT_EQ(error_of("constant_with_warmup", o), "");  // it does not read total_steps
  o = warmup2_total10();
  o.warmup_steps = 11;
  EXPECT_NE(error_of("cosine", o).find("warmup_steps (11) exceeds total_steps (10)"), std::string::npos)
      << error_of("cosine", o);
  o.warmup_steps = -1;
  EXPECT_NE(error_of("constant", o).find("warmup_steps must be >= 0 (got -1)"), std::string::npos);
  o = warmup2_total10();
  o.num_cycles = 0;
  EXPECT_NE(error_of("cosine", o).find("num_cycles must be > 0"), std::string::npos) << error_of("cosine", o);
  o = warmup2_total10();
  o.power = std::nan("");
  EXPECT_NE(error_of("polynomial", o).find("power must be >= 0"), std::string::npos);
  o = warmup2_total10();
  o.warmup_steps = 10;
  EXPECT_EQ(error_of("linear", o), "");  // transformers' max(1, ...) makes this legal for linear
  EXPECT_NE(error_of("polynomial", o).find("must be less than total_steps (10)"), std::string::npos)
      << error_of("polynomial", o);
  o = warmup2_total10();
  o.lr_end = 0.1;
  EXPECT_NE(error_of("polynomial", o, 0.1).find("lr_end must be smaller"), std::string::npos)
      << error_of("polynomial", o, 0.1);
  EXPECT_NE(error_of("linear", warmup2_total10(), 1.0, -1).find("step must be >= 0"), std::string::npos);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The options a row of the table reads, as docs/schedulers.md writes them.
std::string reads_text(unsigned reads) {
  std::string out;
  const std::pair<unsigned, const char*> names[] = {{xlaunch::kReadsWarmup, "warmup_steps"},
                                                    {xlaunch::kReadsTotal, "total_steps"},
                                                    {xlaunch::kReadsCycles, "num_cycles"},
                                                    {xlaunch::kReadsPower, "power"},
                                                    {xlaunch::kReadsLrEnd, "lr_end"}};
  for (const auto& [flag, name] : names)
    if (reads & flag) out += std::string(out.empty() ? "" : ", ") + "`" + name + "`";
  return out.empty() ? "none" : out;
}

TEST(ScheduleFactor, DocsListExactlyTheTable) {
  const std::string doc = read_file(XLAUNCH_SCHEDULERS_DOC);
  const size_t from = doc.find("## The schedules"), to = doc.find("### Formulas");
  ASSERT_TRUE(from != std::string::npos && to != std::string::npos && from < to) << XLAUNCH_SCHEDULERS_DOC;
  const std::string table = doc.substr(from, to - from);
  const std::regex row(R"(\n\| `([a-z_]+)` \| ([^|]*) \| ([^|]*) \|)");
  std::vector<std::string> documented, expected;
  for (auto it = std::sregex_iterator(table.begin(), table.end(), row); it != std::sregex_iterator(); ++it)
    documented.push_back((*it)[1].str() + " | " + (*it)[2].str() + " | " + (*it)[3].str());
  for (const xlaunch::ScheduleInfo& s : xlaunch::kSchedules)
    expected.push_back(std::string(s.name) + " | " + reads_text(s.reads) + " | " + s.meaning);
  EXPECT_EQ(documented, expected) << XLAUNCH_SCHEDULERS_DOC;
  EXPECT_EQ(xlaunch::schedule_names().size(), std::size(xlaunch::kSchedules));
}

}  // namespace
