#include "track/csv_backend.h"

#include "track/utilization.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "track/backends.h"
#include "track/number_text.h"
#include "xlaunch/error.h"

namespace xlaunch::track {
namespace {

constexpr std::string_view kUtilizationPrefix = "xlaunch/";

bool is_utilization(const std::string& tag) { return tag.compare(0, kUtilizationPrefix.size(), kUtilizationPrefix) == 0; }

// What Python's float() and pandas read back: nan, inf, -inf.
std::string csv_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return shortest(v);
}

// A data row's step: its first cell, an integer (a header line or a torn row has none).
bool row_step(std::string_view line, int64_t& step) {
  const auto r = std::from_chars(line.data(), line.data() + line.size(), step);
  return r.ec == std::errc() && r.ptr != line.data() && r.ptr != line.data() + line.size() && *r.ptr == ',';
}

std::string joined(const std::vector<std::string>& names) {
  std::string out = "step, wall_time";
  for (const std::string& n : names) out += ", " + CsvBackend::quote(n);
  return out;
}

}  // namespace

std::string CsvBackend::quote(const std::string& cell) {
  if (cell.find_first_of(",\"\r\n") == std::string::npos) return cell;
  std::string out = "\"";
  for (char c : cell) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + '"';
}

bool CsvBackend::parse_record(std::string_view text, std::vector<std::string>& cells) {
  cells.assign(1, "");
  bool quoted = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c != '"') {
        cells.back() += c;
      } else if (i + 1 < text.size() && text[i + 1] == '"') {
        cells.back() += '"';
        ++i;
      } else {
        quoted = false;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      cells.emplace_back();
    } else if (c != '\r') {
      cells.back() += c;
    }
  }
  return !quoted;
}

CsvBackend::CsvBackend(const std::string& run_dir)
    : run_dir_(run_dir), user_(run_dir + "/metrics.csv"), xlaunch_(run_dir + "/xlaunch.csv") {
  read_header(user_);
  read_header(xlaunch_);
  // xlaunch.csv's columns are every utilization scalar there is, whichever a record holds (the GPU's
  // come and go with NVML's answers): a report is never refused.
  if (xlaunch_.columns.empty()) {
    Part all;
    std::vector<Scalar> tags;
    for (const std::string& t : utilization_tags()) tags.push_back({t, 0});
    for (const Scalar& s : tags) all.push_back(&s);
    fix(xlaunch_, all);
  }
}

void CsvBackend::read_header(Table& t) {
  const std::vector<std::string> lines = t.file.lines();
  if (lines.empty()) return;
  // The header is the first record; a name holding a line break spreads it over several lines.
  std::string text = lines[0];
  size_t used = 1;
  std::vector<std::string> cells;
  while (!parse_record(text, cells) && used < lines.size()) text += "\n" + lines[used++];
  if (!parse_record(text, cells)) return;  // torn by a crash while the header was written: begin() drops it
  if (cells.size() < 2 || cells[0] != "step" || cells[1] != "wall_time") {
    throw UsageError("tracking: " + t.file.path() + " exists and was not written by xlaunch's csv tracker (its header '" +
                     lines[0] + "' does not begin with step,wall_time); move it away, or choose another project_name");
  }
  t.columns.assign(cells.begin() + 2, cells.end());
  for (size_t i = 0; i < t.columns.size(); ++i) t.index.emplace(t.columns[i], i);
  t.from_file = true;
  t.header_lines = used;
  t.header_written = true;
}

void CsvBackend::begin(const RunStart& start) {
  for (Table* t : {&user_, &xlaunch_}) {
    size_t seen = 0;
    t->file.keep_lines([&](std::string_view line) {
      if (seen++ < t->header_lines) return true;
      int64_t step = 0;
      // Below the header, only whole rows of steps before this process's first step stay.
      return row_step(line, step) && step < start.first_step;
    });
  }
}

void CsvBackend::check(const Table& t, const Part& part) const {
  for (const Scalar* s : part) {
    if (s->tag == "step" || s->tag == "wall_time") {
      throw UsageError("acc.log: the name \"" + s->tag + "\" is one of " + t.file.path() +
                       "'s own columns (step, wall_time); log it under another name");
    }
    if (t.columns.empty() || t.index.count(s->tag)) continue;
    throw UsageError("acc.log: \"" + s->tag + "\" is not a column of " + t.file.path() + ", whose columns are " +
                     joined(t.columns) +
                     (t.from_file ? " (its header, written by an earlier process of this run)"
                                  : " (fixed by the first record logged to it)") +
                     ". Log every name in the first call to acc.log (a name may be left out later: its cell stays "
                     "empty), or use log_with: jsonl or tensorboard, which take any names at any call");
  }
}

void CsvBackend::fix(Table& t, const Part& part) {
  if (!t.columns.empty() || part.empty()) return;
  for (const Scalar* s : part) {
    if (t.index.emplace(s->tag, t.columns.size()).second) t.columns.push_back(s->tag);
  }
}

void CsvBackend::split(const std::vector<Scalar>& values, Part& user, Part& util) {
  for (const Scalar& s : values) (is_utilization(s.tag) ? util : user).push_back(&s);
}

void CsvBackend::admit_locked(const Part& user, const Part& util) {
  // Both checked before either is fixed: a refused record fixes no columns.
  check(user_, user);
  check(xlaunch_, util);
  fix(user_, user);
  fix(xlaunch_, util);
}

void CsvBackend::admit(const std::vector<Scalar>& values) {
  Part user, util;
  split(values, user, util);
  std::lock_guard<std::mutex> lock(mu_);
  admit_locked(user, util);
}

std::string CsvBackend::row(const Table& t, int64_t step, double wall_time, const Part& part) const {
  std::vector<std::string> cells(t.columns.size());
  for (const Scalar* s : part) cells[t.index.at(s->tag)] = csv_number(s->value);
  std::string out = std::to_string(step) + "," + csv_number(wall_time);
  for (const std::string& c : cells) out += "," + c;
  return out + "\n";
}

void CsvBackend::scalars(int64_t step, double wall_time, const std::vector<Scalar>& values) {
  Part user, util;
  split(values, user, util);
  std::string user_text, util_text;
  {
    // The tracker admitted this record already; a caller that did not gets the same check here.
    std::lock_guard<std::mutex> lock(mu_);
    admit_locked(user, util);
    if (!user.empty()) user_text = row(user_, step, wall_time, user);
    if (!util.empty()) util_text = row(xlaunch_, step, wall_time, util);
  }
  // The files outside the lock: admit() on the training thread never waits for them.
  for (auto [t, text] : {std::pair{&user_, &user_text}, std::pair{&xlaunch_, &util_text}}) {
    if (text->empty()) continue;
    if (!t->header_written) {
      std::string header = "step,wall_time";
      for (const std::string& c : t->columns) header += "," + quote(c);  // columns are fixed: no lock needed
      t->file.append(header + "\n");
      t->header_written = true;
      // A resume in this process keeps it, as it keeps an earlier process's.
      t->header_lines = 1 + static_cast<size_t>(std::count(header.begin(), header.end(), '\n'));
    }
    t->file.append(*text);
  }
}

void CsvBackend::flush() {
  user_.file.flush();
  xlaunch_.file.flush();
}

std::unique_ptr<Backend> make_csv_backend(const std::string& run_dir) { return std::make_unique<CsvBackend>(run_dir); }

}  // namespace xlaunch::track
