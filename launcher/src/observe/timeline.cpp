#include "observe/timeline.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "observe/html.h"
#include "observe/logged_scalars.h"
#include "observe/op_table_print.h"
#include "xlaunch/status/private_files.h"
#include "xlaunch/status/status_dir.h"
#include "xlaunch/status/trace_part.h"

namespace xlaunch::launcher {
namespace {

using nlohmann::json;

// Rank r's part as Chrome trace events (pid = rank, tid = thread; microseconds): its name and
// place in the list, its threads' names, and one complete ("X") event per span.
void add_rank_events(const status::TracePart& part, const std::string& host, json& events) {
  const int r = part.rank;
  const std::string name = "rank " + std::to_string(r) + (host.empty() ? "" : " (" + host + ")");
  events.push_back({{"ph", "M"}, {"pid", r}, {"name", "process_name"}, {"args", {{"name", name}}}});
  events.push_back({{"ph", "M"}, {"pid", r}, {"name", "process_sort_index"}, {"args", {{"sort_index", r}}}});
  for (const auto& [tid, thread] : part.threads)
    events.push_back({{"ph", "M"}, {"pid", r}, {"tid", tid}, {"name", "thread_name"}, {"args", {{"name", thread}}}});
  for (const status::TraceSpan& s : part.spans) {
    json e = {{"ph", "X"}, {"pid", r}, {"tid", s.tid}, {"ts", static_cast<double>(s.start_ns) / 1000.0},
              {"dur", static_cast<double>(s.dur_ns) / 1000.0}, {"name", s.name}};
    for (const auto& [name, value] : s.args) e["args"][name] = value;
    events.push_back(std::move(e));
  }
}

// DIR/scalars.jsonl (rank 0's tracker's, status_dir.h), or nullopt and *why when there is none to read.
std::optional<std::string> read_logged_scalars(int dirfd, std::string* why) {
  constexpr size_t kMaxBytes = size_t{256} << 20;  // a long job logging every step stays far below
  struct stat st {};
  if (fstatat(dirfd, status::kLoggedScalarsFile, &st, AT_SYMLINK_NOFOLLOW) != 0) {
    const int e = errno;
    *why = e == ENOENT ? "does not exist: log_with is off (no tracker), or the program never called acc.init_trackers"
                       : std::string("cannot be read: ") + std::strerror(e);
    return std::nullopt;
  }
  std::optional<std::string> text = files::read_private_file(dirfd, status::kLoggedScalarsFile, kMaxBytes);
  if (!text) *why = "is not a regular file of this user's of at most 256 MiB, or vanished while read: left out";
  return text;
}

const char* const kColors[profile::kPhases] = {"#e4572e", "#4c78a8", "#72b7b2", "#f2cf5b", "#9467bd", "#bab0ac"};

}  // namespace

std::string merge_trace(const std::string& dir, const JobReport& report,
                        const std::vector<std::pair<double, std::vector<GpuSample>>>& gpu_history) {
  std::string why;
  const int dirfd = files::open_private_dir(dir, &why);
  if (dirfd < 0) return "no timeline: " + why;
  json events = json::array();
  int64_t epoch_ns = 0;  // the ranks' timestamps count from it
  int merged = 0;
  std::vector<int> missing;
  for (int r = 0; r < report.world; ++r) {
    const auto part = status::take_trace_part(dir, r);
    if (!part) {
      missing.push_back(r);
      continue;
    }
    ++merged;
    epoch_ns = part->epoch_ns;
    add_rank_events(*part, r < static_cast<int>(report.ranks.size()) ? report.ranks[r].host : "", events);
    add_operator_events(report.operators, r, events);
  }
  if (!gpu_history.empty()) {
    const int pid = report.world;  // the GPUs get a track of their own, after the ranks
    events.push_back({{"ph", "M"}, {"pid", pid}, {"name", "process_name"},
                      {"args", {{"name", "GPUs (NVML, machine of xlaunch run)"}}}});
    for (const auto& [t, per_gpu] : gpu_history)
      for (size_t g = 0; g < per_gpu.size(); ++g)
        events.push_back({{"ph", "C"}, {"pid", pid}, {"name", "gpu" + std::to_string(g)},
                          {"ts", (t - static_cast<double>(epoch_ns) / 1e9) * 1e6},
                          {"args", {{"sm_pct", per_gpu[g].sm_pct}, {"mem_used_gib", per_gpu[g].mem_used_gib},
                                    {"power_w", per_gpu[g].power_w}}}});
  }
  const json trace = {{"displayTimeUnit", "ms"}, {"traceEvents", std::move(events)}};
  const std::string text = trace.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  const bool ok = merged > 0 && files::write_private_file(dirfd, "trace.json", text, &why);
  close(dirfd);
  if (merged == 0) return "no timeline: no rank wrote its part to " + dir;
  if (!ok) return "no timeline: " + why;
  std::string msg = "timeline of " + std::to_string(merged) + " rank" + (merged == 1 ? "" : "s") + " in " + dir +
                    "/trace.json (open it in https://ui.perfetto.dev or chrome://tracing)";
  if (!missing.empty()) msg += "; " + std::to_string(missing.size()) + " rank(s) wrote none (a machine without a shared trace_dir?)";
  return msg;
}

std::string write_report_html(const std::string& dir, const JobReport& report, const std::vector<RatePoint>& rates) {
  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>xlaunch utilization report</title>\n"
    << "<style>body{font-family:sans-serif;margin:24px;color:#222}td,th{padding:2px 8px;text-align:right}"
    << "th{border-bottom:1px solid #888}li{margin:6px 0}</style></head><body>\n"
    << "<h1>Where the time goes</h1>\n<p>Steps " << report.first_step << "&ndash;" << report.last_step << " of "
    << report.total_steps << ", " << report.world << " rank(s).</p>\n";

  // Phase split per rank: one stacked bar each.
  const int bar_w = 600, row_h = 28, left = 80;
  const int height = row_h * (report.world + 1) + 30;
  h << "<h2>Phase split per rank</h2>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << left + bar_w + 20
    << "\" height=\"" << height << "\" font-size=\"12\">\n";
  for (int r = 0; r < report.world; ++r) {
    const RankReport& rr = report.ranks[r];
    const int y = 10 + r * row_h;
    h << "<text x=\"0\" y=\"" << y + 16 << "\">rank " << r << "</text>\n";
    double x = left;
    for (int p = 0; p < profile::kPhases && rr.present; ++p) {
      const double w = bar_w * rr.phase_pct[p] / 100.0;
      h << "<rect x=\"" << x << "\" y=\"" << y << "\" width=\"" << w << "\" height=\"" << row_h - 6 << "\" fill=\""
        << kColors[p] << "\"><title>" << profile::kPhaseNames[p] << " " << rr.phase_pct[p] << "%</title></rect>\n";
      x += w;
    }
  }
  const int ly = 10 + report.world * row_h + 10;
  for (int p = 0; p < profile::kPhases; ++p)
    h << "<rect x=\"" << left + p * 100 << "\" y=\"" << ly << "\" width=\"12\" height=\"12\" fill=\"" << kColors[p]
      << "\"/><text x=\"" << left + p * 100 + 16 << "\" y=\"" << ly + 11 << "\">" << profile::kPhaseNames[p] << "</text>\n";
  h << "</svg>\n";

  // Steps/s over time (rank 0, one point a second).
  h << "<h2>Steps per second over time (rank 0)</h2>\n";
  if (rates.size() < 2) {
    h << "<p>The job was too short for a curve.</p>\n";
  } else {
    const double t_max = rates.back().t_s;
    double v_max = 0;
    for (const auto& p : rates) v_max = std::max(v_max, p.steps_per_s);
    v_max = v_max > 0 ? v_max * 1.1 : 1;
    const int w = 600, ht = 200, pad = 40;
    h << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w + pad + 10 << "\" height=\"" << ht + pad
      << "\" font-size=\"12\">\n<line x1=\"" << pad << "\" y1=\"" << ht << "\" x2=\"" << w + pad << "\" y2=\"" << ht
      << "\" stroke=\"#888\"/><line x1=\"" << pad << "\" y1=\"0\" x2=\"" << pad << "\" y2=\"" << ht
      << "\" stroke=\"#888\"/>\n<text x=\"0\" y=\"12\">" << static_cast<int>(v_max) << "</text><text x=\"" << w
      << "\" y=\"" << ht + 16 << "\">" << static_cast<int>(t_max) << " s</text>\n<polyline fill=\"none\" stroke=\"#4c78a8\" "
      << "stroke-width=\"2\" points=\"";
    for (const auto& p : rates) h << pad + w * p.t_s / t_max << "," << ht - ht * p.steps_per_s / v_max << " ";
    h << "\"/>\n</svg>\n";
  }

  // What rank 0's tracker logged, over the same steps as its steps/s. (Without the directory there
  // is no page either: said below.)
  std::string why, why_unread;
  const int dirfd = files::open_private_dir(dir, &why);
  const std::optional<std::string> logged = dirfd >= 0 ? read_logged_scalars(dirfd, &why_unread) : std::nullopt;
  h << logged_scalars_html(dir + "/" + status::kLoggedScalarsFile, logged, why_unread);

  // The numbers and the advice.
  h << "<h2>Per rank</h2>\n<table><tr><th>rank</th><th>host</th><th>steps/s</th><th>samples/s</th>";
  for (const char* n : profile::kPhaseNames) h << "<th>" << n << "</th>";
  h << "<th>cpu</th><th>gpu_sm</th></tr>\n";
  char buf[64];
  for (const auto& rr : report.ranks) {
    h << "<tr><td>" << rr.rank << "</td><td>" << html_escaped(rr.host) << "</td>";
    std::snprintf(buf, sizeof buf, "<td>%.2f</td><td>%.1f</td>", rr.steps_per_s, rr.samples_per_s);
    h << buf;
    for (double p : rr.phase_pct) {
      std::snprintf(buf, sizeof buf, "<td>%.1f%%</td>", p);
      h << buf;
    }
    std::snprintf(buf, sizeof buf, "<td>%.0f%%</td>", rr.cpu_pct);
    h << buf << "<td>" << (rr.gpu ? std::to_string(static_cast<int>(rr.gpu->sm_pct)) + "%" : "-") << "</td></tr>\n";
  }
  h << "</table>\n";
  if (const std::string zero = zero_line(report); !zero.empty()) h << "<p>" << html_escaped(zero) << "</p>\n";
  h << "<h2>Advice</h2>\n";
  if (report.advice.empty()) h << "<p>Nothing crosses a threshold: no advice.</p>\n";
  else {
    h << "<ul>\n";
    for (const auto& a : report.advice) h << "<li>" << html_escaped(a) << "</li>\n";
    h << "</ul>\n";
  }
  h << "</body></html>\n";

  const bool ok = dirfd >= 0 && files::write_private_file(dirfd, "report.html", h.str(), &why);
  if (dirfd >= 0) close(dirfd);
  if (!ok) {
    std::fprintf(stderr, "xlaunch: warning: no report.html: %s\n", why.c_str());
    return "";
  }
  return dir + "/report.html";
}

}  // namespace xlaunch::launcher
