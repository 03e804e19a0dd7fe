// The operator table's file (xlaunch/status/op_table.h) and what `xlaunch run` makes of it
// (launcher/src/observe/op_table_print.h): written and read back whole, refused when it is another
// rank's or broken, printed with its columns, in report.json, and as timeline events.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "observe/op_table_print.h"
#include "scratch_dir.h"
#include "xlaunch/status/op_table.h"

namespace status = xlaunch::status;
namespace launcher = xlaunch::launcher;

namespace {

status::OpTable sample(int rank, bool shapes) {
  status::OpTable t;
  t.rank = rank;
  t.first_step = 11;
  t.steps = 5;
  t.requested_steps = 5;
  t.record_shapes = shapes;
  t.self_cpu_total_ns = 5'000'000;
  t.rows = {{"aten::mm", shapes ? "[[64, 512], [512, 512]]" : "", 25, 2'500'000, 2'600'000, 0, 0.5},
            {"autograd::engine::evaluate_function: AddmmBackward0 and a name longer than the column", "", 15, 40'000,
             2'700'000, 0, 0.008},
            {"aten::t", "", 70, 700, 1'300, 0, 0.00014}};
  t.threads = {{status::kOpThread0, "operators (LibTorch profiler)"}};
  t.spans = {{status::kOpThread0, "aten::mm", 1'200'000, 97'000, shapes ? "[[64, 512], [512, 512]]" : ""}};
  return t;
}

}  // namespace

TEST(OpTable, WrittenAndReadBackWhole) {
  const xlaunch::test::ScratchDir dir;
  std::string why;
  ASSERT_TRUE(status::write_op_table(dir.path, sample(1, true), &why)) << why;
  EXPECT_FALSE(status::read_op_table(dir.path, 0)) << "rank 0 wrote none";
  const auto t = status::read_op_table(dir.path, 1);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->first_step, 11);
  EXPECT_EQ(t->steps, 5);
  EXPECT_EQ(t->requested_steps, 5);
  EXPECT_TRUE(t->record_shapes);
  EXPECT_FALSE(t->cuda);
  ASSERT_EQ(t->rows.size(), 3u);
  EXPECT_EQ(t->rows[0].name, "aten::mm");
  EXPECT_EQ(t->rows[0].shapes, "[[64, 512], [512, 512]]");
  EXPECT_EQ(t->rows[0].calls, 25);
  EXPECT_EQ(t->rows[0].self_cpu_ns, 2'500'000);
  EXPECT_EQ(t->rows[0].cpu_total_ns, 2'600'000);
  EXPECT_DOUBLE_EQ(t->rows[0].share, 0.5);
  ASSERT_EQ(t->spans.size(), 1u);
  EXPECT_EQ(t->spans[0].start_ns, 1'200'000);
  EXPECT_EQ(t->spans[0].dur_ns, 97'000);
  EXPECT_EQ(t->threads.at(0).second, "operators (LibTorch profiler)");
}

TEST(OpTable, AnotherRanksOrABrokenFileIsNone) {
  const xlaunch::test::ScratchDir dir;
  std::string why;
  ASSERT_TRUE(status::write_op_table(dir.path, sample(1, false), &why)) << why;
  ASSERT_EQ(rename((dir.path + "/ops-1.json").c_str(), (dir.path + "/ops-0.json").c_str()), 0);
  EXPECT_FALSE(status::read_op_table(dir.path, 0)) << "it says rank 1";
  std::ofstream(dir.path + "/ops-2.json") << "{\"rank\": 2, \"rows\":";
  EXPECT_FALSE(status::read_op_table(dir.path, 2));
}

TEST(OpTable, PrintedWithItsColumns) {
  const std::string text = status::format_op_table(sample(0, false), 2);
  EXPECT_NE(text.find("xlaunch: operators of rank 0, steps 11-15 (LibTorch's profiler; share of all self CPU time 5.000ms):\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("name"), std::string::npos);
  for (const char* column : {"calls", "self CPU", "CPU total", "self CUDA", "share"})
    EXPECT_NE(text.find(column), std::string::npos) << column;
  EXPECT_NE(text.find("aten::mm"), std::string::npos);
  EXPECT_NE(text.find("2.500ms"), std::string::npos);
  EXPECT_NE(text.find("50.0%"), std::string::npos);
  EXPECT_NE(text.find("autograd::engine::evaluate_function: AddmmBackward0 ..."), std::string::npos)
      << "cut at 55 characters, as torch's table:\n" << text;
  EXPECT_EQ(text.find("aten::t "), std::string::npos) << "two rows asked for";
  EXPECT_EQ(text.find("input shapes"), std::string::npos);
  EXPECT_NE(status::format_op_table(sample(0, true), 3).find("[[64, 512], [512, 512]]"), std::string::npos);
}

TEST(OpTable, APartialProfileSaysHowManyStepsItCovers) {
  status::OpTable t = sample(0, false);
  t.steps = 3;  // the rank ended after step 13 of 11-15
  const std::string text = status::format_op_table(t, 2);
  EXPECT_NE(text.find("xlaunch: operators of rank 0, steps 11-13, 3 of the 5 asked for (the rank ended first; what it "
                      "ran after step 13 counts too) (LibTorch's profiler;"),
            std::string::npos)
      << text;
  EXPECT_EQ(status::format_op_table(sample(0, false), 2).find("asked for"), std::string::npos) << "whole: not said";
  EXPECT_EQ(launcher::op_tables_json({t})[0]["requested_steps"], 5);
  EXPECT_EQ(launcher::op_tables_json({t})[0]["steps"], 3);
}

TEST(OpTable, TheLauncherPrintsEveryRankAndNamesThoseWithout) {
  const std::string text = launcher::format_op_tables({sample(0, false), sample(2, false)}, 3, 5);
  EXPECT_NE(text.find("operators of rank 0"), std::string::npos);
  EXPECT_NE(text.find("operators of rank 2"), std::string::npos);
  EXPECT_NE(text.find("rank 1 published no operator table: it ended before step 11, the first profiled"), std::string::npos) << text;
  EXPECT_EQ(launcher::format_op_tables({}, 2, 0), "") << "profile_ops off: nothing";
}

TEST(OpTable, ReportJsonAndTimelineEvents) {
  const auto j = launcher::op_tables_json({sample(0, true)});
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["rank"], 0);
  EXPECT_EQ(j[0]["device"], "cpu");
  EXPECT_EQ(j[0]["share_of"], "self_cpu_total_us");
  EXPECT_EQ(j[0]["rows"][0]["name"], "aten::mm");
  EXPECT_EQ(j[0]["rows"][0]["calls"], 25);
  EXPECT_DOUBLE_EQ(j[0]["rows"][0]["self_cpu_us"].get<double>(), 2500.0);
  EXPECT_EQ(j[0]["rows"][0]["input_shapes"], "[[64, 512], [512, 512]]");
  EXPECT_FALSE(launcher::op_tables_json({sample(0, false)})[0]["rows"][0].contains("input_shapes"));

  nlohmann::json events = nlohmann::json::array();
  launcher::add_operator_events({sample(0, true), sample(1, true)}, 1, events);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0]["ph"], "M");
  EXPECT_EQ(events[0]["args"]["name"], "operators (LibTorch profiler)");
  EXPECT_EQ(events[1]["ph"], "X");
  EXPECT_EQ(events[1]["pid"], 1);
  EXPECT_EQ(events[1]["tid"], status::kOpThread0);
  EXPECT_DOUBLE_EQ(events[1]["ts"].get<double>(), 1200.0);
  EXPECT_DOUBLE_EQ(events[1]["dur"].get<double>(), 97.0);
  EXPECT_EQ(events[1]["args"]["input_shapes"], "[[64, 512], [512, 512]]");
}
