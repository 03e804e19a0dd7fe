#include "track/jsonl_backend.h"

#include "xlaunch/error.h"

#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>

#include "track/backends.h"
#include "track/number_text.h"

namespace xlaunch::track {
namespace {

constexpr std::string_view kStepKey = "{\"step\": ";

// Python's json: json.dumps(float("nan")) is NaN, and json.loads reads NaN, Infinity, -Infinity.
std::string json_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return shortest(v);
}

std::string json_string(const std::string& s) {
  // A name that is not UTF-8 is written with U+FFFD in place of its bad bytes rather than refused:
  // the record's values are worth more than the exact bytes of its name.
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

std::string JsonlBackend::line(int64_t step, double wall_time, const std::vector<Scalar>& values) {
  std::string out(kStepKey);
  out += std::to_string(step);
  out += ", \"wall_time\": ";
  out += json_number(wall_time);
  for (const Scalar& v : values) {
    out += ", ";
    out += json_string(v.tag);
    out += ": ";
    out += json_number(v.value);
  }
  out += "}\n";
  return out;
}

bool JsonlBackend::step_of(std::string_view line, int64_t& step) {
  if (line.substr(0, kStepKey.size()) != kStepKey) return false;
  line.remove_prefix(kStepKey.size());
  const auto r = std::from_chars(line.data(), line.data() + line.size(), step);
  return r.ec == std::errc() && r.ptr != line.data() + line.size() && *r.ptr == ',';
}

void JsonlBackend::admit(const std::vector<Scalar>& values) {
  for (const Scalar& s : values)
    if (s.tag == "step" || s.tag == "wall_time")
      throw UsageError("acc.log: the name \"" + s.tag + "\" is one of " + file_.path() +
                       "'s own keys (step, wall_time); log it under another name");
}

void JsonlBackend::begin(const RunStart& start) {
  file_.keep_lines([&](std::string_view line) {
    int64_t step = 0;
    return !step_of(line, step) || step < start.first_step;  // a line not ours is not ours to drop
  });
}

void JsonlBackend::scalars(int64_t step, double wall_time, const std::vector<Scalar>& values) {
  file_.append(line(step, wall_time, values));
}

std::unique_ptr<Backend> make_jsonl_backend(const std::string& path) { return std::make_unique<JsonlBackend>(path); }

}  // namespace xlaunch::track
