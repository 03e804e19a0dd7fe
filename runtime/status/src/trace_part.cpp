#include "xlaunch/status/trace_part.h"

#include "json_file.h"

namespace xlaunch::status {
namespace {

using nlohmann::json;

std::string file_name(int rank) { return "trace-rank" + std::to_string(rank) + ".json"; }

json to_json(const TracePart& part) {
  json threads = json::array(), spans = json::array();
  for (const auto& [tid, name] : part.threads) threads.push_back({{"tid", tid}, {"name", name}});
  for (const TraceSpan& s : part.spans) {
    json j = {{"tid", s.tid}, {"name", s.name}, {"start_ns", s.start_ns}, {"dur_ns", s.dur_ns}};
    for (const auto& [name, value] : s.args) j["args"][name] = value;
    spans.push_back(std::move(j));
  }
  return {{"rank", part.rank}, {"epoch_ns", part.epoch_ns}, {"threads", threads}, {"spans", spans}};
}

TracePart from_json(const json& j) {  // throws json::exception on a field that is missing or mistyped
  TracePart part;
  part.rank = j.at("rank").get<int>();
  part.epoch_ns = j.at("epoch_ns").get<int64_t>();
  for (const json& t : j.at("threads")) part.threads.emplace_back(t.at("tid").get<int>(), t.at("name").get<std::string>());
  for (const json& s : j.at("spans")) {
    TraceSpan span;
    span.tid = s.at("tid").get<int>();
    span.name = s.at("name").get<std::string>();
    span.start_ns = s.at("start_ns").get<int64_t>();
    span.dur_ns = s.at("dur_ns").get<int64_t>();
    if (s.contains("args"))
      for (const auto& [name, value] : s.at("args").items()) span.args.emplace_back(name, value.get<int64_t>());
    part.spans.push_back(std::move(span));
  }
  return part;
}

}  // namespace

bool write_trace_part(const std::string& dir, const TracePart& part, std::string* why) {
  // A name that is not UTF-8 (a user's span) is written with U+FFFD in place of its bad bytes, as
  // the operator tables are, rather than losing the rank's whole timeline.
  return write_json_file(dir, file_name(part.rank), to_json(part), why, json::error_handler_t::replace);
}

std::optional<TracePart> take_trace_part(const std::string& dir, int rank) {
  return read_rank_json(dir, file_name(rank), rank, from_json, AfterRead::remove);
}

}  // namespace xlaunch::status
