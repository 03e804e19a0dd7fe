#include "xlaunch/status/op_table.h"

#include <algorithm>
#include <cstdio>

#include "json_file.h"

namespace xlaunch::status {
namespace {

using nlohmann::json;

std::string file_name(int rank) { return "ops-" + std::to_string(rank) + ".json"; }

json to_json(const OpTable& t) {
  json rows = json::array(), threads = json::array(), spans = json::array();
  for (const OpRow& r : t.rows)
    rows.push_back({{"name", r.name}, {"shapes", r.shapes}, {"calls", r.calls}, {"self_cpu_ns", r.self_cpu_ns},
                    {"cpu_total_ns", r.cpu_total_ns}, {"self_cuda_ns", r.self_cuda_ns}, {"share", r.share}});
  for (const auto& [tid, name] : t.threads) threads.push_back({{"tid", tid}, {"name", name}});
  for (const OpSpan& s : t.spans)
    spans.push_back({{"tid", s.tid}, {"name", s.name}, {"start_ns", s.start_ns}, {"dur_ns", s.dur_ns}, {"shapes", s.shapes}});
  return {{"rank", t.rank}, {"first_step", t.first_step}, {"steps", t.steps}, {"requested_steps", t.requested_steps}, {"device", t.cuda ? "cuda" : "cpu"},
          {"record_shapes", t.record_shapes}, {"self_cpu_total_ns", t.self_cpu_total_ns},
          {"self_cuda_total_ns", t.self_cuda_total_ns}, {"rows", rows}, {"threads", threads}, {"spans", spans}};
}

OpTable from_json(const json& j) {  // throws json::exception on a field that is missing or mistyped
  OpTable t;
  t.rank = j.at("rank").get<int>();
  t.first_step = j.at("first_step").get<int64_t>();
  t.steps = j.at("steps").get<int64_t>();
  t.requested_steps = j.at("requested_steps").get<int64_t>();
  t.cuda = j.at("device").get<std::string>() == "cuda";
  t.record_shapes = j.at("record_shapes").get<bool>();
  t.self_cpu_total_ns = j.at("self_cpu_total_ns").get<int64_t>();
  t.self_cuda_total_ns = j.at("self_cuda_total_ns").get<int64_t>();
  for (const json& r : j.at("rows"))
    t.rows.push_back({r.at("name").get<std::string>(), r.at("shapes").get<std::string>(), r.at("calls").get<int64_t>(),
                      r.at("self_cpu_ns").get<int64_t>(), r.at("cpu_total_ns").get<int64_t>(),
                      r.at("self_cuda_ns").get<int64_t>(), r.at("share").get<double>()});
  for (const json& th : j.at("threads")) t.threads.emplace_back(th.at("tid").get<int>(), th.at("name").get<std::string>());
  for (const json& s : j.at("spans"))
    t.spans.push_back({s.at("tid").get<int>(), s.at("name").get<std::string>(), s.at("start_ns").get<int64_t>(),
                       s.at("dur_ns").get<int64_t>(), s.at("shapes").get<std::string>()});
  return t;
}

// torch.profiler's _format_time: us below a millisecond, ms below a second, else s.
std::string format_time(int64_t ns) {
  char buf[32];
  const double us = static_cast<double>(ns) / 1e3;
  if (us >= 1e6) std::snprintf(buf, sizeof buf, "%.3fs", us / 1e6);
  else if (us >= 1e3) std::snprintf(buf, sizeof buf, "%.3fms", us / 1e3);
  else std::snprintf(buf, sizeof buf, "%.3fus", us);
  return buf;
}

std::string fitted(const std::string& name, size_t width) {  // as torch's table: cut with "..."
  return name.size() <= width ? name : name.substr(0, width - 3) + "...";
}

}  // namespace

std::string format_op_table(const OpTable& t, size_t max_rows) {
  constexpr size_t kNameWidth = 55;  // torch.profiler's max_name_column_width
  const size_t n = std::min(max_rows, t.rows.size());
  size_t width = 4;
  for (size_t i = 0; i < n; ++i) width = std::max(width, fitted(t.rows[i].name, kNameWidth).size());
  char line[512];
  std::string out = "xlaunch: operators of rank " + std::to_string(t.rank) + ", steps " + std::to_string(t.first_step) +
                    "-" + std::to_string(t.first_step + t.steps - 1) +
                    (t.steps < t.requested_steps ? ", " + std::to_string(t.steps) + " of the " +
                                                       std::to_string(t.requested_steps) +
                                                       " asked for (the rank ended first; what it ran after step " +
                                                       std::to_string(t.first_step + t.steps - 1) + " counts too)"
                                                 : std::string()) +
                    " (LibTorch's profiler; share of " +
                    (t.cuda ? "all kernel time " + format_time(t.self_cuda_total_ns)
                            : "all self CPU time " + format_time(t.self_cpu_total_ns)) +
                    "):\n";
  std::snprintf(line, sizeof line, "xlaunch:   %-*s %8s %12s %12s %12s %7s%s\n", static_cast<int>(width), "name", "calls",
                "self CPU", "CPU total", "self CUDA", "share", t.record_shapes ? "  input shapes" : "");
  out += line;
  for (size_t i = 0; i < n; ++i) {
    const OpRow& r = t.rows[i];
    std::snprintf(line, sizeof line, "xlaunch:   %-*s %8lld %12s %12s %12s %6.1f%%", static_cast<int>(width),
                  fitted(r.name, kNameWidth).c_str(), static_cast<long long>(r.calls), format_time(r.self_cpu_ns).c_str(),
                  format_time(r.cpu_total_ns).c_str(), format_time(r.self_cuda_ns).c_str(), 100.0 * r.share);
    out += line;
    out += t.record_shapes ? "  " + r.shapes + "\n" : "\n";
  }
  return out;
}

bool write_op_table(const std::string& dir, const OpTable& table, std::string* why) {
  // An operator's name is the library's, not necessarily UTF-8: a stray byte becomes U+FFFD.
  return write_json_file(dir, file_name(table.rank), to_json(table), why, json::error_handler_t::replace);
}

std::optional<OpTable> read_op_table(const std::string& dir, int rank) {
  return read_rank_json(dir, file_name(rank), rank, from_json, AfterRead::keep);
}

}  // namespace xlaunch::status
