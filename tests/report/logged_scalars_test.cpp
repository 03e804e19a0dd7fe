// report.html's "Logged scalars over steps" (launcher/src/observe/logged_scalars.h): the tracker's
// scalars.jsonl read back (Python's NaN and infinities, a torn last line), the tags charted, and
// the charts on one axis of steps, in the page write_report_html writes.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "observe/logged_scalars.h"
#include "observe/timeline.h"
#include "scratch_dir.h"

using namespace xlaunch::launcher;

namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

const ScalarSeries* find(const LoggedScalars& s, const std::string& tag) {
  for (const auto& x : s.series)
    if (x.tag == tag) return &x;
  return nullptr;
}

// Steps 0..100 of a loss, and steps/s every 50 steps (report_interval 50): the second chart's
// first point, at step 50, sits halfway across (x = 70 + 600 * 50/100) only on the shared axis.
std::string two_curves() {
  std::string t;
  for (int step = 0; step <= 100; ++step)
    t += "{\"step\": " + std::to_string(step) + ", \"wall_time\": 1.5, \"train/loss\": " + std::to_string(2.0 - step / 100.0) + "}\n";
  t += "{\"step\": 50, \"wall_time\": 9.0, \"xlaunch/steps_per_s\": 12.5, \"xlaunch/data_wait\": 0.1}\n";
  t += "{\"step\": 100, \"wall_time\": 13.0, \"xlaunch/steps_per_s\": 6.25, \"xlaunch/data_wait\": 0.4}\n";
  return t;
}

}  // namespace

TEST(LoggedScalars, ParsesPythonsNonFiniteValuesAndSkipsWhatIsNotARecord) {
  const LoggedScalars s = parse_logged_scalars(
      "{\"step\": 1, \"wall_time\": 1.5, \"train/loss\": 2.5, \"lr\": 0.1}\n"
      "{\"step\": 2, \"wall_time\": 2.5, \"train/loss\": NaN, \"lr\": 0.1, \"says \\\"NaN\\\" Infinity\": 3}\n"
      "{\"step\": 2, \"wall_time\": 2.6, \"xlaunch/steps_per_s\": 9.5, \"xlaunch/data_wait\": -Infinity}\n"
      "\n"
      "{\"step\": 3, \"train/loss\": Infinity}\n"
      "{\"step\": 3, \"train/loss\": 1.25, \"flag\": true}\n"
      "{\"step\": \"three\"}\n"
      "[1, 2]\n"
      "{\"step\": 4, \"train/lo");
  EXPECT_EQ(s.records, 5u);
  EXPECT_EQ(s.unreadable, 3u) << "a step that is not an integer, an array, a torn last line";
  ASSERT_EQ(s.series.size(), 5u);
  EXPECT_EQ(s.series[0].tag, "train/loss");
  EXPECT_EQ(s.series[1].tag, "lr");
  EXPECT_EQ(s.series[2].tag, "says \"NaN\" Infinity") << "words inside a string are not values";
  EXPECT_EQ(s.series[3].tag, "xlaunch/steps_per_s");
  const ScalarSeries& loss = s.series[0];
  ASSERT_EQ(loss.points.size(), 3u);
  EXPECT_EQ(loss.points[0], std::make_pair(int64_t{1}, 2.5));
  EXPECT_TRUE(std::isnan(loss.points[1].second));
  EXPECT_EQ(loss.points[2], std::make_pair(int64_t{3}, 1.25)) << "a step logged again: its last value";
  EXPECT_EQ(loss.non_finite, 1u);
  const ScalarSeries* wait = find(s, "xlaunch/data_wait");
  ASSERT_NE(wait, nullptr);
  EXPECT_EQ(wait->points[0].second, -INFINITY);
  EXPECT_EQ(find(s, "flag"), nullptr) << "not a number";
  EXPECT_EQ(find(s, "wall_time"), nullptr);
}

TEST(LoggedScalars, ChartsFourOfTheUsersTagsLossFirstThenStepsPerSecond) {
  std::string t = "{\"step\": 1, \"acc\": 1, \"train/loss\": 1, \"lr\": 1, \"xlaunch/comm_wait\": 1, \"val_loss\": 1, "
                  "\"grad_norm\": 1, \"xlaunch/steps_per_s\": 1, \"epoch\": 1}\n";
  const LoggedScalars s = parse_logged_scalars(t);
  std::vector<std::string> tags;
  for (size_t i : charted_series(s)) tags.push_back(s.series[i].tag);
  EXPECT_EQ(tags, (std::vector<std::string>{"train/loss", "val_loss", "acc", "lr", "xlaunch/steps_per_s"}));
}

TEST(LoggedScalars, EveryChartSharesTheSameSteps) {
  const std::string html = logged_scalars_html("/t/scalars.jsonl", two_curves(), "");
  EXPECT_NE(html.find("<h2>Logged scalars over steps</h2>"), std::string::npos);
  EXPECT_EQ(count(html, "<svg"), 2u) << html;
  EXPECT_NE(html.find(">train/loss</text>"), std::string::npos);
  EXPECT_NE(html.find(">xlaunch/steps_per_s</text>"), std::string::npos);
  EXPECT_EQ(html.find("xlaunch/data_wait"), std::string::npos) << "only steps/s of xlaunch's own";
  EXPECT_EQ(count(html, ">step 0</text>"), 2u) << html;
  EXPECT_EQ(count(html, ">step 100</text>"), 2u) << html;
  EXPECT_NE(html.find("d=\"M70,20 L76,"), std::string::npos) << "the loss from step 0, at its highest";
  EXPECT_NE(html.find("d=\"M370,20 L670,130"), std::string::npos) << "steps/s from step 50, halfway\n" << html;
  EXPECT_NE(html.find(">12.5</text>"), std::string::npos) << "the y axis names the highest value";
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("could not be read"), std::string::npos);
}

TEST(LoggedScalars, SaysWhatItLeftOut) {
  const std::string html = logged_scalars_html(
      "/t/scalars.jsonl",
      "{\"step\": 1, \"<b>loss</b>\": 1}\n{\"step\": 2, \"<b>loss</b>\": NaN}\n{\"step\": 3, \"<b>loss</b>\": 2}\n"
      "{\"step\": 4, \"<b>lo",
      "");
  EXPECT_NE(html.find(">&lt;b&gt;loss&lt;/b&gt;</text>"), std::string::npos) << html;
  EXPECT_EQ(html.find("<b>"), std::string::npos);
  EXPECT_NE(html.find("1 non-finite value(s) not drawn"), std::string::npos) << html;
  EXPECT_NE(html.find("1 line(s) could not be read"), std::string::npos) << html;
  EXPECT_EQ(html.find("no scalar of its own"), std::string::npos);
  EXPECT_NE(html.find("d=\"M70,130 M670,20 \""), std::string::npos) << "the NaN breaks the line\n" << html;
}

TEST(LoggedScalars, ALongRunKeepsItsSpikesInFewPoints) {
  std::string t;
  for (int step = 0; step < 20000; ++step)
    t += "{\"step\": " + std::to_string(step) + ", \"loss\": " + (step == 12345 ? "1000" : "1") + "}\n";
  const std::string html = logged_scalars_html("/t/scalars.jsonl", t, "");
  EXPECT_LE(count(html, " L"), 1200u) << "at most two points a pixel column";
  EXPECT_NE(html.find(">1000</text>"), std::string::npos) << "the spike is still the highest point";
}

TEST(LoggedScalars, WithoutTheFileSaysWhy) {
  const std::string html = logged_scalars_html("/t/scalars.jsonl", std::nullopt, "does not exist: log_with is off");
  EXPECT_NE(html.find("No logged scalars: <code>/t/scalars.jsonl</code> does not exist: log_with is off."), std::string::npos)
      << html;
  EXPECT_EQ(html.find("<svg"), std::string::npos);
  const std::string only_other =
      logged_scalars_html("/t/scalars.jsonl", "{\"step\": 1, \"xlaunch/comm_wait\": 0.5}\n", "");
  EXPECT_NE(only_other.find("No logged scalars to chart"), std::string::npos) << only_other;
}

class ReportHtml : public xlaunch::test::ScratchDirTest<> {
 protected:
  std::string page() {
    JobReport r;
    r.world = 1;
    r.ranks.resize(1);
    r.ranks[0].present = true;
    EXPECT_EQ(write_report_html(dir_, r, {}), dir_ + "/report.html");
    std::ifstream in(dir_ + "/report.html");
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
};

TEST_F(ReportHtml, ChartsTheTrackersScalarsBesideStepsPerSecond) {
  std::ofstream(dir_ + "/scalars.jsonl") << two_curves() << "{\"step\": 101, \"train/lo";
  const std::string html = page();
  EXPECT_NE(html.find("<h2>Logged scalars over steps</h2>"), std::string::npos) << html;
  EXPECT_NE(html.find("d=\"M370,20 L670,130"), std::string::npos) << html;
  EXPECT_NE(html.find("1 line(s) could not be read"), std::string::npos) << html;
  EXPECT_EQ(html.find("<script"), std::string::npos);
}

TEST_F(ReportHtml, WithoutATrackerSaysLogWithIsOff) {
  const std::string html = page();
  EXPECT_NE(html.find("No logged scalars: <code>" + dir_ + "/scalars.jsonl</code> does not exist: log_with is off"),
            std::string::npos)
      << html;
}
