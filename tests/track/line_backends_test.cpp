// The JSONL and CSV backends' files, byte for byte: their lines, non-finite values, quoting, the
// CSV's fixed columns and its refusal, resumption (orphans and torn lines dropped), a directory that
// cannot be written, and a full disk (/dev/full). Python's own readers read them in
// tracked_files_test.py.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include "scratch_dir.h"
#include "track/backends.h"
#include "track/csv_backend.h"
#include "track/utilization.h"
#include "track/jsonl_backend.h"
#include "track/number_text.h"
#include "track/tracker.h"
#include "xlaunch/error.h"
#include "xlaunch/tracking.h"

namespace xlaunch::track {
namespace {

using test::ScratchDirTest;
const double kInf = std::numeric_limits<double>::infinity();

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void put(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

RunStart from(int64_t first_step) {
  RunStart s;
  s.first_step = first_step;
  return s;
}

TEST(NumberText, ShortestRoundTrip) {
  EXPECT_EQ(shortest(0.001), "0.001");
  EXPECT_EQ(shortest(64), "64");
  EXPECT_EQ(shortest(1e-5), "1e-05");
  EXPECT_EQ(shortest(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(shortest(1733300000.25), "1733300000.25");
}

TEST(HParam, AsAPersonReadsIt) {
  EXPECT_EQ(HParam(0.001).to_string(), "0.001");
  EXPECT_EQ(HParam(64).to_string(), "64");
  EXPECT_EQ(HParam(true).to_string(), "true");
  EXPECT_EQ(HParam(false).to_string(), "false");
  EXPECT_EQ(HParam("adamw").to_string(), "adamw");
  EXPECT_EQ(HParam(std::string("a \"b\"")).to_string(), "a \"b\"");
}

TEST(Jsonl, OneLinePerRecordInTheOrderGiven) {
  EXPECT_EQ(JsonlBackend::line(12, 1733300000.25,
                               {{"train/loss", 0.5}, {"lr", 0.1}, {"q\"uo\\te\n", std::nan("")}, {"i", kInf}, {"m", -kInf}}),
            "{\"step\": 12, \"wall_time\": 1733300000.25, \"train/loss\": 0.5, \"lr\": 0.1, "
            "\"q\\\"uo\\\\te\\n\": NaN, \"i\": Infinity, \"m\": -Infinity}\n");
  int64_t step = 0;
  EXPECT_TRUE(JsonlBackend::step_of("{\"step\": -3, \"wall_time\": 1}", step));
  EXPECT_EQ(step, -3);
  EXPECT_FALSE(JsonlBackend::step_of("{\"step\": 3", step));  // torn
  EXPECT_FALSE(JsonlBackend::step_of("{\"wall_time\": 1, \"step\": 3}", step));
}

using JsonlFile = ScratchDirTest<>;

TEST_F(JsonlFile, BuffersUntilFlushThenAppends) {
  const std::string path = dir_ + "/metrics.jsonl";
  auto b = make_jsonl_backend(path);
  EXPECT_EQ(b->name(), "jsonl");
  EXPECT_EQ(b->where(), path);
  b->begin(from(0));
  b->scalars(0, 1.5, {{"a", 1}});
  b->histogram(0, 1.5, Histogram{"h"});  // ignored
  EXPECT_EQ(slurp(path), "");
  b->flush();
  b->scalars(1, 2.5, {{"a", 2}});
  b->flush();
  EXPECT_EQ(slurp(path), "{\"step\": 0, \"wall_time\": 1.5, \"a\": 1}\n{\"step\": 1, \"wall_time\": 2.5, \"a\": 2}\n");
}

TEST_F(JsonlFile, ResumeDropsOrphansAndATornLine) {
  const std::string path = dir_ + "/metrics.jsonl";
  put(path, "{\"step\": 0, \"wall_time\": 1, \"a\": 0}\n{\"step\": 1, \"wall_time\": 1, \"a\": 1}\n"
            "{\"step\": 2, \"wall_time\": 1, \"a\": 2}\n{\"step\": 1, \"wall_time\": 1, \"a\": 9}\n{\"step\": 3, \"wal");
  auto b = make_jsonl_backend(path);
  b->begin(from(2));
  EXPECT_EQ(slurp(path), "{\"step\": 0, \"wall_time\": 1, \"a\": 0}\n{\"step\": 1, \"wall_time\": 1, \"a\": 1}\n"
                         "{\"step\": 1, \"wall_time\": 1, \"a\": 9}\n");
  b->scalars(2, 5, {{"a", 20}});
  b->flush();
  EXPECT_EQ(slurp(path), "{\"step\": 0, \"wall_time\": 1, \"a\": 0}\n{\"step\": 1, \"wall_time\": 1, \"a\": 1}\n"
                         "{\"step\": 1, \"wall_time\": 1, \"a\": 9}\n{\"step\": 2, \"wall_time\": 5, \"a\": 20}\n");
  EXPECT_EQ(slurp(path + ".tmp"), "");  // renamed away
}

TEST_F(JsonlFile, ResumeWithNothingToDropLeavesTheFile) {
  const std::string path = dir_ + "/metrics.jsonl";
  const std::string before = "{\"step\": 0, \"wall_time\": 1, \"a\": 0}\nnot a record of ours\n";
  put(path, before);
  auto b = make_jsonl_backend(path);
  b->begin(from(1));
  EXPECT_EQ(slurp(path), before);
}

TEST_F(JsonlFile, UnwritableDirectoryIsRefusedWithPathAndReason) {
  put(dir_ + "/file", "");
  const std::string path = dir_ + "/file/metrics.jsonl";
  try {
    make_jsonl_backend(path);
    FAIL() << "no WriteError";
  } catch (const WriteError& e) {
    EXPECT_EQ(e.err(), ENOTDIR);
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Not a directory"), std::string::npos) << e.what();
  }
}

TEST(JsonlDevFull, FullDiskStopsTheBackendWithOneWarning) {
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(make_jsonl_backend("/dev/full"));
  Tracker t(std::move(backends), RunStart{});
  testing::internal::CaptureStderr();
  t.log(0, {{"loss", 1}});
  t.log(1, {{"loss", 2}});
  t.end();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(t.live_backends().empty());
  EXPECT_NE(err.find("[xlaunch] warning: tracking: the jsonl tracker stops writing /dev/full: cannot write"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("No space left on device (the disk is full); training goes on"), std::string::npos) << err;
  EXPECT_EQ(err.find("warning", err.find("warning") + 1), std::string::npos) << "more than one warning: " << err;
}

TEST(Csv, QuotesAsRfc4180AndParsesBack) {
  EXPECT_EQ(CsvBackend::quote("train/loss"), "train/loss");
  EXPECT_EQ(CsvBackend::quote("a,b"), "\"a,b\"");
  EXPECT_EQ(CsvBackend::quote("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(CsvBackend::quote("two\nlines"), "\"two\nlines\"");
  std::vector<std::string> cells;
  EXPECT_TRUE(CsvBackend::parse_record("step,wall_time,\"a,b\",\"say \"\"hi\"\"\",\"two\nlines\",x", cells));
  EXPECT_EQ(cells, (std::vector<std::string>{"step", "wall_time", "a,b", "say \"hi\"", "two\nlines", "x"}));
  EXPECT_FALSE(CsvBackend::parse_record("step,wall_time,\"two", cells));
}

using CsvFiles = ScratchDirTest<>;

// xlaunch.csv: its header (every utilization tag), and a row with steps_per_s only.
std::string util_header() {
  std::string h = "step,wall_time";
  for (const std::string& t : xlaunch::track::utilization_tags()) h += "," + t;
  return h + "\n";
}
std::string util_row(const std::string& step_and_time, const std::string& steps_per_s) {
  return step_and_time + "," + steps_per_s + std::string(xlaunch::track::utilization_tags().size() - 1, ',') + "\n";
}

TEST_F(CsvFiles, HeaderOfTheFirstRecordEmptyCellsAndUtilizationApart) {
  CsvBackend b(dir_);
  EXPECT_EQ(b.name(), "csv");
  EXPECT_EQ(b.where(), dir_);
  b.begin(from(0));
  b.admit({{"loss", 0}, {"a,b", 0}});
  b.scalars(0, 1.5, {{"loss", 0.25}, {"a,b", std::nan("")}});
  b.scalars(1, 2.5, {{"a,b", kInf}});
  b.scalars(2, 3.5, {{"loss", -kInf}, {"xlaunch/steps_per_s", 10.5}});
  b.scalars(3, 4.5, {{"xlaunch/steps_per_s", 11}});
  b.flush();
  EXPECT_EQ(slurp(dir_ + "/metrics.csv"), "step,wall_time,loss,\"a,b\"\n0,1.5,0.25,nan\n1,2.5,,inf\n2,3.5,-inf,\n");
  // Every utilization tag is a column from the start: the GPU's come and go with NVML's answers.
  EXPECT_EQ(slurp(dir_ + "/xlaunch.csv"), util_header() + util_row("2,3.5", "10.5") + util_row("3,4.5", "11"));
  b.admit({{"xlaunch/gpu_sm", 50}});
}

TEST_F(CsvFiles, NameThatIsNotAColumnIsRefusedWithTheFix) {
  CsvBackend b(dir_);
  b.admit({{"train/loss", 1}, {"lr", 1}});
  b.admit({{"lr", 1}});
  b.admit({{"xlaunch/steps_per_s", 1}});  // xlaunch.csv's columns are its own
  try {
    b.admit({{"train/loss", 1}, {"val/acc", 1}});
    FAIL() << "no UsageError";
  } catch (const UsageError& e) {
    const std::string m = e.what();
    for (const std::string part : {"\"val/acc\" is not a column of " + dir_ + "/metrics.csv",
                                   std::string("step, wall_time, train/loss, lr"), std::string("first record"),
                                   std::string("Log every name in the first call"), std::string("jsonl or tensorboard")})
      EXPECT_NE(m.find(part), std::string::npos) << part << " not in: " << m;
  }
  EXPECT_THROW(b.admit({{"step", 1}}), UsageError);
}

TEST_F(CsvFiles, RefusedFirstRecordFixesNoColumns) {
  CsvBackend b(dir_);
  b.admit({{"xlaunch/steps_per_s", 1}});
  EXPECT_THROW(b.admit({{"loss", 1}, {"xlaunch/b", 1}}), UsageError);  // xlaunch/b is not a column
  b.admit({{"lr", 1}});  // metrics.csv's columns were not fixed by the refused record
  EXPECT_THROW(b.admit({{"loss", 1}}), UsageError);
}

TEST_F(CsvFiles, ResumeKeepsTheHeaderAndDropsOrphansAndATornRow) {
  put(dir_ + "/metrics.csv", "step,wall_time,\"two\nlines\",lr\n0,1,1,2\n1,1,3,4\n2,1,5,6\n3,1,7");
  {
    CsvBackend b(dir_);
    try {
      b.admit({{"loss", 1}});
      FAIL() << "no UsageError";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("written by an earlier process of this run"), std::string::npos) << e.what();
    }
    b.admit({{"lr", 1}});
    b.begin(from(1));
    EXPECT_EQ(slurp(dir_ + "/metrics.csv"), "step,wall_time,\"two\nlines\",lr\n0,1,1,2\n");
    b.scalars(1, 9, {{"lr", 0.5}});
    b.flush();
  }
  EXPECT_EQ(slurp(dir_ + "/metrics.csv"), "step,wall_time,\"two\nlines\",lr\n0,1,1,2\n1,9,,0.5\n");
  // A restart from scratch: every row is an orphan, the header stays.
  CsvBackend again(dir_);
  again.begin(from(0));
  EXPECT_EQ(slurp(dir_ + "/metrics.csv"), "step,wall_time,\"two\nlines\",lr\n");
}

TEST_F(CsvFiles, ResumeInTheSameProcessKeepsItsOwnHeader) {
  CsvBackend b(dir_);
  b.begin(from(0));
  for (int s = 0; s < 3; ++s) b.scalars(s, 1, {{"x\ny", double(s)}, {"xlaunch/steps_per_s", 7}});
  b.begin(from(1));
  EXPECT_EQ(slurp(dir_ + "/metrics.csv"), "step,wall_time,\"x\ny\"\n0,1,0\n");
  EXPECT_EQ(slurp(dir_ + "/xlaunch.csv"), util_header() + util_row("0,1", "7"));
  b.scalars(1, 2, {{"x\ny", 5}});
  b.flush();
  EXPECT_EQ(slurp(dir_ + "/metrics.csv"), "step,wall_time,\"x\ny\"\n0,1,0\n1,2,5\n");
}

TEST_F(CsvFiles, TornHeaderIsDroppedAndWrittenAgain) {
  put(dir_ + "/metrics.csv", "step,wall_ti");
  CsvBackend b(dir_);
  b.begin(from(0));
  b.scalars(0, 1, {{"x", 2}});
  b.flush();
  EXPECT_EQ(slurp(dir_ + "/metrics.csv"), "step,wall_time,x\n0,1,2\n");
}

TEST_F(CsvFiles, FileNotWrittenByXlaunchIsRefused) {
  put(dir_ + "/metrics.csv", "epoch,loss\n1,2\n");
  try {
    CsvBackend b(dir_);
    FAIL() << "no UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(dir_ + "/metrics.csv exists and was not written by xlaunch"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(CsvFiles, UnwritableDirectoryIsRefused) {
  put(dir_ + "/file", "");
  try {
    make_csv_backend(dir_ + "/file");
    FAIL() << "no WriteError";
  } catch (const WriteError& e) {
    EXPECT_EQ(e.err(), ENOTDIR);
    EXPECT_NE(std::string(e.what()).find(dir_ + "/file/metrics.csv: Not a directory"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace xlaunch::track
