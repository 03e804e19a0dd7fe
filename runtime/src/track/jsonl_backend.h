// The JSONL backend (log_with: jsonl): one JSON object per record, one record per line, in
// run_dir/metrics.jsonl, for people who read their curves with pandas (pd.read_json(path,
// lines=True)) or a few lines of Python:
//   {"step": 12, "wall_time": 1733300000.25, "train/loss": 0.5, "lr": 0.1}
// The names in the order logged; numbers in their shortest round-trip form; NaN, Infinity and
// -Infinity as Python's json module writes and reads them. Histograms are not written.
// Resumption: begin() drops the lines of earlier processes at RunStart::first_step or later (and
// a line torn by a crash) by rewriting the file atomically, then appends.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "track/backend.h"
#include "track/line_file.h"

namespace xlaunch::track {

class JsonlBackend : public Backend {
 public:
  explicit JsonlBackend(const std::string& path) : file_(path) {}

  std::string name() const override { return "jsonl"; }
  std::string where() const override { return file_.path(); }
  // "step" and "wall_time" are each line's own keys: a value under either name would shadow them.
  void admit(const std::vector<Scalar>& values) override;
  void begin(const RunStart& start) override;
  void scalars(int64_t step, double wall_time, const std::vector<Scalar>& values) override;
  void histogram(int64_t, double, const Histogram&) override {}
  void flush() override { file_.flush(); }

  // One record as its line (with the newline).
  static std::string line(int64_t step, double wall_time, const std::vector<Scalar>& values);
  // The step of a line this backend wrote; false for a line it did not.
  static bool step_of(std::string_view line, int64_t& step);

 private:
  LineFile file_;
};

}  // namespace xlaunch::track
