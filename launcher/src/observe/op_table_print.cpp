#include "observe/op_table_print.h"

#include "xlaunch/status/step_stats.h"

namespace xlaunch::launcher {

std::vector<status::OpTable> read_op_tables(const std::string& status_dir, int world) {
  std::vector<status::OpTable> out;
  for (int r = 0; r < world; ++r)
    if (auto t = status::read_op_table(status_dir, r)) out.push_back(std::move(*t));
  return out;
}

std::string format_op_tables(const std::vector<status::OpTable>& tables, int world, int64_t profile_ops) {
  if (profile_ops <= 0) return "";
  std::string out;
  size_t next = 0;
  for (int r = 0; r < world; ++r) {
    if (next < tables.size() && tables[next].rank == r) {
      out += status::format_op_table(tables[next++], status::kPrintedOpRows);
      continue;
    }
    out += "xlaunch: rank " + std::to_string(r) + " published no operator table: it ended before step " +
           std::to_string(profile::kWarmupSteps + 1) + ", the first profiled (after " +
           std::to_string(profile::kWarmupSteps) + " warm-up steps; profile_ops " + std::to_string(profile_ops) +
           "), its profiler did not start or stop (its warning says why), or its machine does not see the status "
           "directory\n";
  }
  return out;
}

nlohmann::ordered_json op_tables_json(const std::vector<status::OpTable>& tables) {
  using json = nlohmann::ordered_json;
  const auto us = [](int64_t ns) { return static_cast<double>(ns) / 1e3; };
  json out = json::array();
  for (const status::OpTable& t : tables) {
    json rows = json::array();
    for (const status::OpRow& r : t.rows) {
      json row = {{"name", r.name}, {"calls", r.calls}, {"self_cpu_us", us(r.self_cpu_ns)},
                  {"cpu_total_us", us(r.cpu_total_ns)}, {"self_cuda_us", us(r.self_cuda_ns)}, {"share", r.share}};
      if (t.record_shapes) row["input_shapes"] = r.shapes;
      rows.push_back(std::move(row));
    }
    out.push_back({{"rank", t.rank}, {"first_step", t.first_step}, {"steps", t.steps}, {"requested_steps", t.requested_steps}, {"device", t.cuda ? "cuda" : "cpu"},
                   {"self_cpu_total_us", us(t.self_cpu_total_ns)}, {"self_cuda_total_us", us(t.self_cuda_total_ns)},
                   {"share_of", t.cuda ? "self_cuda_total_us" : "self_cpu_total_us"}, {"rows", std::move(rows)}});
  }
  return out;
}

void add_operator_events(const std::vector<status::OpTable>& tables, int rank, nlohmann::json& events) {
  for (const status::OpTable& t : tables) {
    if (t.rank != rank) continue;
    for (const auto& [tid, name] : t.threads)
      events.push_back({{"ph", "M"}, {"pid", rank}, {"tid", tid}, {"name", "thread_name"}, {"args", {{"name", name}}}});
    for (const status::OpSpan& s : t.spans) {
      nlohmann::json e = {{"ph", "X"}, {"pid", rank}, {"tid", s.tid}, {"ts", static_cast<double>(s.start_ns) / 1000.0},
                          {"dur", static_cast<double>(s.dur_ns) / 1000.0}, {"name", s.name}};
      if (t.record_shapes) e["args"]["input_shapes"] = s.shapes;
      events.push_back(std::move(e));
    }
  }
}

}  // namespace xlaunch::launcher
