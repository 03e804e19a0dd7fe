// What rank 0's tracker logged, read back for report.html's "Logged scalars over steps": with
// tracking on (log_with), `xlaunch run --trace DIR` has the tracker also write DIR/scalars.jsonl,
// one JSON object per acc.log call or utilization record:
//   {"step": 120, "wall_time": 1733300000.25, "train/loss": 0.5, "lr": 0.1}
//   {"step": 150, "wall_time": 1733300003.5, "xlaunch/steps_per_s": 9.8, "xlaunch/data_wait": 0.02}
// with NaN and infinities as Python's json writes them (NaN, Infinity, -Infinity), which JSON
// itself (and nlohmann's parser) has no words for. The page charts the loss and steps/s over the
// same steps, so that a slowdown lines up with the training curve.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace xlaunch::launcher {

struct ScalarSeries {
  std::string tag;
  std::vector<std::pair<int64_t, double>> points;  // (step, value) by step; a step logged twice: its last value
  size_t non_finite = 0;                           // NaN or infinite values among them (not drawn)
};

struct LoggedScalars {
  std::vector<ScalarSeries> series;  // every tag, in the order first logged
  size_t records = 0;                // lines that were a record: an object with an integer "step"
  size_t unreadable = 0;             // lines that were not (a torn last line of a job killed mid-write)
};

// Pure: the records of a scalars.jsonl text. Empty lines are skipped; a line that is not a JSON
// object with an integer "step" counts as unreadable; values other than numbers (and NaN,
// Infinity, -Infinity) are left out, as are "step" and "wall_time".
LoggedScalars parse_logged_scalars(const std::string& jsonl);

// Pure: the series the page charts, as indices into s.series: up to 4 of the user's tags (those
// not starting with "xlaunch/"), those whose name contains "loss" first, each group in the order
// first logged; then xlaunch/steps_per_s when it was logged.
std::vector<size_t> charted_series(const LoggedScalars& s);

// Pure: the page's section "Logged scalars over steps" for the file at `path`: one small inline-SVG
// line chart per charted series, all over the same steps (the range of every charted one), or a
// sentence saying why there is none. `text`: the file's contents, nullopt when it could not be
// read, `why_unread` then saying why (missing: tracking was off).
std::string logged_scalars_html(const std::string& path, const std::optional<std::string>& text,
                                const std::string& why_unread);

}  // namespace xlaunch::launcher
