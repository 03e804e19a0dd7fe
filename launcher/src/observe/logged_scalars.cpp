#include "observe/logged_scalars.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <limits>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "observe/html.h"

namespace xlaunch::launcher {
namespace {

using json = nlohmann::ordered_json;  // a record's names in the order written: "first logged"

constexpr size_t kMaxUserTags = 4;
constexpr const char* kStepsPerS = "xlaunch/steps_per_s";
const std::pair<const char*, double> kNonFinite[] = {{"-Infinity", -std::numeric_limits<double>::infinity()},
                                                     {"Infinity", std::numeric_limits<double>::infinity()},
                                                     {"NaN", std::numeric_limits<double>::quiet_NaN()}};

// The line with Python's bare NaN, Infinity and -Infinity (outside strings) quoted, so that JSON
// parses it; values() turns those strings back into numbers. Keys and strings pass unchanged.
std::string with_non_finite_quoted(const std::string& line) {
  std::string out;
  bool in_string = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char ch = line[i];
    if (in_string) {
      out += ch;
      if (ch == '\\' && i + 1 < line.size()) out += line[++i];
      else if (ch == '"') in_string = false;
      continue;
    }
    in_string = ch == '"';
    const auto token = std::find_if(std::begin(kNonFinite), std::end(kNonFinite),
                                    [&](const auto& t) { return line.compare(i, std::strlen(t.first), t.first) == 0; });
    if (token == std::end(kNonFinite)) {
      out += ch;
      continue;
    }
    out += std::string("\"") + token->first + "\"";
    i += std::strlen(token->first) - 1;
  }
  return out;
}

std::optional<double> value_of(const json& v) {
  if (v.is_number()) return v.get<double>();
  if (!v.is_string()) return std::nullopt;
  for (const auto& [word, x] : kNonFinite)
    if (v.get<std::string>() == word) return x;
  return std::nullopt;
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

// The points drawn: every one (a non-finite value then breaks the line), or, when there are more
// than twice the chart's pixel columns, the lowest and the highest finite value of each column (so
// that a spike stays visible in a long run).
std::vector<std::pair<int64_t, double>> drawn(const ScalarSeries& s, int64_t x0, int64_t x1, int width) {
  if (s.points.size() <= static_cast<size_t>(2 * width)) return s.points;
  std::vector<std::pair<int64_t, double>> out;
  const double span = static_cast<double>(std::max<int64_t>(x1 - x0, 1));
  for (size_t i = 0; i < s.points.size();) {
    const auto column = [&](size_t k) { return static_cast<int>(width * static_cast<double>(s.points[k].first - x0) / span); };
    const int c = column(i);
    size_t lo = s.points.size(), hi = lo;
    for (; i < s.points.size() && column(i) == c; ++i) {
      if (!std::isfinite(s.points[i].second)) continue;
      if (lo == s.points.size() || s.points[i].second < s.points[lo].second) lo = i;
      if (hi == s.points.size() || s.points[i].second > s.points[hi].second) hi = i;
    }
    if (lo == s.points.size()) continue;
    out.push_back(s.points[std::min(lo, hi)]);
    if (lo != hi) out.push_back(s.points[std::max(lo, hi)]);
  }
  return out;
}

// One line chart of `s` over steps x0..x1 (shared by every chart of the section).
void chart(std::ostream& h, const ScalarSeries& s, int64_t x0, int64_t x1) {
  constexpr int w = 600, ht = 110, left = 70, top = 20;
  const auto points = drawn(s, x0, x1, w);
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const auto& [step, v] : points)
    if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  if (!(lo <= hi)) lo = 0, hi = 1;  // nothing finite to draw
  if (lo == hi) lo -= std::max(std::abs(lo) * 0.1, 1e-9), hi += std::max(std::abs(hi) * 0.1, 1e-9);
  const double span = static_cast<double>(std::max<int64_t>(x1 - x0, 1));
  h << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << left + w + 10 << "\" height=\"" << top + ht + 20
    << "\" font-size=\"12\">\n<text x=\"0\" y=\"12\" font-weight=\"bold\">" << html_escaped(s.tag) << "</text>";
  if (s.non_finite > 0)
    h << "<text x=\"" << left + w << "\" y=\"12\" text-anchor=\"end\" fill=\"#b00\">" << s.non_finite
      << " non-finite value(s) not drawn</text>";
  h << "\n<line x1=\"" << left << "\" y1=\"" << top + ht << "\" x2=\"" << left + w << "\" y2=\"" << top + ht
    << "\" stroke=\"#888\"/><line x1=\"" << left << "\" y1=\"" << top << "\" x2=\"" << left << "\" y2=\"" << top + ht
    << "\" stroke=\"#888\"/>\n<text x=\"" << left - 4 << "\" y=\"" << top + 10 << "\" text-anchor=\"end\">" << number(hi)
    << "</text><text x=\"" << left - 4 << "\" y=\"" << top + ht << "\" text-anchor=\"end\">" << number(lo)
    << "</text><text x=\"" << left << "\" y=\"" << top + ht + 15 << "\">step " << x0 << "</text><text x=\"" << left + w
    << "\" y=\"" << top + ht + 15 << "\" text-anchor=\"end\">step " << x1 << "</text>\n<path fill=\"none\" stroke=\""
    << (s.tag == kStepsPerS ? "#4c78a8" : "#e4572e") << "\" stroke-width=\"1.5\" d=\"";
  bool pen_down = false;
  for (const auto& [step, v] : points) {
    if (!std::isfinite(v)) {
      pen_down = false;
      continue;
    }
    h << (pen_down ? "L" : "M") << number(left + w * static_cast<double>(step - x0) / span) << ","
      << number(top + ht - ht * (v - lo) / (hi - lo)) << " ";
    pen_down = true;
  }
  h << "\"/>\n";
  // A few points (a metric logged once an epoch) are marked, so that a single one shows at all.
  if (points.size() <= 40)
    for (const auto& [step, v] : points)
      if (std::isfinite(v))
        h << "<circle r=\"2.5\" fill=\"" << (s.tag == kStepsPerS ? "#4c78a8" : "#e4572e") << "\" cx=\""
          << number(left + w * static_cast<double>(step - x0) / span) << "\" cy=\""
          << number(top + ht - ht * (v - lo) / (hi - lo)) << "\"/>";
  h << "\n</svg><br>\n";
}

}  // namespace

LoggedScalars parse_logged_scalars(const std::string& jsonl) {
  LoggedScalars out;
  std::map<std::string, std::map<int64_t, double>> by_tag;  // a step logged again replaces its value
  std::vector<std::string> order;
  std::istringstream lines(jsonl);
  for (std::string line; std::getline(lines, line);) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const json record = json::parse(with_non_finite_quoted(line), nullptr, /*allow_exceptions=*/false);
    if (!record.is_object() || !record.contains("step") || !record["step"].is_number_integer()) {
      ++out.unreadable;
      continue;
    }
    ++out.records;
    const int64_t step = record["step"].get<int64_t>();
    for (const auto& [tag, v] : record.items()) {
      const std::optional<double> x = value_of(v);
      if (tag == "step" || tag == "wall_time" || !x) continue;
      auto [it, fresh] = by_tag.try_emplace(tag);
      if (fresh) order.push_back(tag);
      it->second[step] = *x;
    }
  }
  for (const std::string& tag : order) {
    ScalarSeries s{tag, {by_tag[tag].begin(), by_tag[tag].end()}, 0};
    s.non_finite = static_cast<size_t>(std::count_if(s.points.begin(), s.points.end(),
                                                     [](const auto& p) { return !std::isfinite(p.second); }));
    out.series.push_back(std::move(s));
  }
  return out;
}

std::vector<size_t> charted_series(const LoggedScalars& s) {
  std::vector<size_t> loss, other, out;
  for (size_t i = 0; i < s.series.size(); ++i) {
    const std::string& tag = s.series[i].tag;
    if (tag.rfind("xlaunch/", 0) == 0) continue;
    (tag.find("loss") != std::string::npos ? loss : other).push_back(i);
  }
  for (const auto* group : {&loss, &other})
    for (size_t i : *group)
      if (out.size() < kMaxUserTags) out.push_back(i);
  for (size_t i = 0; i < s.series.size(); ++i)
    if (s.series[i].tag == kStepsPerS) out.push_back(i);
  return out;
}

std::string logged_scalars_html(const std::string& path, const std::optional<std::string>& text,
                                const std::string& why_unread) {
  std::ostringstream h;
  h << "<h2>Logged scalars over steps</h2>\n";
  const std::string where = "<code>" + html_escaped(path) + "</code>";
  if (!text) {
    h << "<p>No logged scalars: " << where << " " << html_escaped(why_unread) << ".</p>\n";
    return h.str();
  }
  const LoggedScalars s = parse_logged_scalars(*text);
  const std::vector<size_t> charted = charted_series(s);
  const size_t user_tags = static_cast<size_t>(std::count_if(s.series.begin(), s.series.end(), [](const ScalarSeries& x) {
    return x.tag.rfind("xlaunch/", 0) != 0;
  }));
  if (charted.empty()) {
    h << "<p>No logged scalars to chart: " << where << " holds " << s.records << " record(s), with neither a "
      << "scalar of the program's own (acc.log) nor " << kStepsPerS << ".</p>\n";
    return h.str();
  }
  h << "<p>What rank 0 logged (" << where << "), on one axis of steps for every chart, so that a slowdown "
    << "in steps/s lines up with the training curve.";
  if (user_tags == 0) h << " The program logged no scalar of its own (acc.log): steps/s alone.";
  if (user_tags > kMaxUserTags)
    h << " Charted: " << kMaxUserTags << " of the program's " << user_tags << " tags (those named *loss* first); "
      << "the file has them all.";
  if (s.unreadable > 0)
    h << " " << s.unreadable << " line(s) could not be read (a last line torn when the job stopped mid-write) "
      << "and are left out.";
  h << "</p>\n";
  int64_t x0 = std::numeric_limits<int64_t>::max(), x1 = std::numeric_limits<int64_t>::min();
  for (size_t i : charted)
    for (const auto& [step, v] : s.series[i].points) x0 = std::min(x0, step), x1 = std::max(x1, step);
  for (size_t i : charted) chart(h, s.series[i], x0, x1);
  return h.str();
}

}  // namespace xlaunch::launcher
