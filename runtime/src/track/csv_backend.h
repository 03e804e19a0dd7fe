// The CSV backend (log_with: csv), for spreadsheets and pandas (pd.read_csv). Two files in the
// run directory: metrics.csv for the user's names, xlaunch.csv for the utilization ("xlaunch/..."
// names, logged on records of their own; a record holding both kinds is written as one row in
// each). Each file's header is step,wall_time and the names of its first record, in that record's
// order, fixed from then on: a later record may leave names out (their cells stay empty), but a
// name that is not a column is refused at the acc.log call that logs it (admit(): UsageError).
// Names are quoted as RFC 4180 says when they hold a comma, a quote or a line break; numbers are
// in their shortest round-trip form, and the non-finite ones nan, inf and -inf, as Python's float()
// and pandas read them.
// Resumption: a file that exists keeps its header (its columns carry over to this process), and
// begin() drops its rows at RunStart::first_step or later and a row torn by a crash (an atomic
// rewrite, as for JSONL).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "track/backend.h"
#include "track/line_file.h"

namespace xlaunch::track {

class CsvBackend : public Backend {
 public:
  // Opens (creating) run_dir/metrics.csv and run_dir/xlaunch.csv, and reads the header of each
  // that exists. Throws WriteError for a directory that cannot be written, and UsageError for a
  // file there that xlaunch did not write (its header does not begin with step,wall_time).
  explicit CsvBackend(const std::string& run_dir);

  std::string name() const override { return "csv"; }
  std::string where() const override { return run_dir_; }
  void begin(const RunStart& start) override;
  void admit(const std::vector<Scalar>& values) override;
  void scalars(int64_t step, double wall_time, const std::vector<Scalar>& values) override;
  void histogram(int64_t, double, const Histogram&) override {}
  void flush() override;

  // A cell as RFC 4180 writes it: quoted (its quotes doubled) when it holds , " CR or LF.
  static std::string quote(const std::string& cell);
  // The cells of one CSV record (which may span lines inside quotes); false when it ends inside a
  // quote (torn).
  static bool parse_record(std::string_view text, std::vector<std::string>& cells);

 private:
  struct Table {
    explicit Table(const std::string& path) : file(path) {}
    LineFile file;
    // Fixed by the first record admitted (or by the file's header): written by admit() on the
    // training thread, read by scalars() on the writer's, both under mu_.
    std::vector<std::string> columns;
    std::unordered_map<std::string, size_t> index;
    bool from_file = false;      // the columns are an earlier process's header
    // Writer thread only: whether the file has its header, and its physical lines (a name may hold
    // a line break), which begin() keeps.
    bool header_written = false;
    size_t header_lines = 0;
  };
  using Part = std::vector<const Scalar*>;

  static void split(const std::vector<Scalar>& values, Part& user, Part& util);
  void admit_locked(const Part& user, const Part& util);  // under mu_
  void read_header(Table& t);
  void check(const Table& t, const Part& part) const;  // throws UsageError
  static void fix(Table& t, const Part& part);          // the first record's names become the columns
  std::string row(const Table& t, int64_t step, double wall_time, const Part& part) const;

  std::string run_dir_;
  std::mutex mu_;
  Table user_, xlaunch_;
};

}  // namespace xlaunch::track
