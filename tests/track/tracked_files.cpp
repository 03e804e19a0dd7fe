// Writes a run's JSONL and CSV files through the Tracker, as two processes of one run would, for
// tracked_files_test.py to read back with Python's json and csv modules:
//   phase 1 logs steps 0..9 (and utilization records at 0 and 5), then "crashes" mid-write (a
//   torn last line in each file); phase 2 resumes from a checkpoint at step 6 and logs 6..12
//   (utilization at 10). Steps 6..9 of phase 1 are orphans, and must be gone.
// The values are value(phase, step, k) below, which the Python test computes the same way; they
// include NaN, inf and -inf, and names that CSV must quote and JSON must escape.
//   usage: tracked_files RUN_DIR
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>

#include "track/backends.h"
#include "track/tracker.h"

using namespace xlaunch::track;

namespace {

const char* const kNames[] = {"train/loss", "lr", "a,b", "say \"hi\"", "two\nlines", "\xc3\xbcn\xc3\xaf"};
const char* const kUtilization[] = {"xlaunch/steps_per_s", "xlaunch/data_wait"};

double value(int phase, int step, int k) {
  if (step % 5 == 3 && k == 0) return std::nan("");
  if (step % 5 == 4 && k == 1) return std::numeric_limits<double>::infinity();
  if (step % 5 == 0 && k == 2) return -std::numeric_limits<double>::infinity();
  return (step + 1) * (k + 1) / 7.0 + 100.0 * phase + k * 1e-3;
}

double utilization(int phase, int step, int k) { return (step + 1) / 3.0 + phase + k; }

bool run_phase(const std::string& dir, int phase, int from, int to) {
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(make_jsonl_backend(dir + "/metrics.jsonl"));
  backends.push_back(make_csv_backend(dir));
  RunStart start;
  start.project_name = "tracked_files";
  Tracker t(std::move(backends), start);
  if (phase == 2) t.resume(from, "checkpoint-" + std::to_string(from));  // before the first record, as after load_state
  for (int step = from; step <= to; ++step) {
    std::vector<Scalar> values;
    const int names = step == 7 ? 2 : 6;  // step 7 leaves names out: empty CSV cells
    for (int k = 0; k < names; ++k) values.push_back({kNames[k], value(phase, step, k)});
    t.log(step, values);
    if (step % 5 == 0) t.log(step, {{kUtilization[0], utilization(phase, step, 0)}, {kUtilization[1], utilization(phase, step, 1)}});
  }
  t.end();
  if (t.live_backends() != std::vector<std::string>{"jsonl", "csv"}) {
    std::fprintf(stderr, "tracked_files: phase %d: a backend stopped\n", phase);
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: tracked_files RUN_DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  try {
    if (!run_phase(dir, 1, 0, 9)) return 1;
    // A crash mid-write: each file ends in a line without its newline.
    std::ofstream(dir + "/metrics.jsonl", std::ios::app) << "{\"step\": 10, \"wall_ti";
    std::ofstream(dir + "/metrics.csv", std::ios::app) << "10,1733300000,0.5";
    std::ofstream(dir + "/xlaunch.csv", std::ios::app) << "10,17";
    if (!run_phase(dir, 2, 6, 12)) return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tracked_files: %s\n", e.what());
    return 1;
  }
  return 0;
}
