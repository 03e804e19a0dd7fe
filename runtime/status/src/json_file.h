// The status directory's JSON files (the profiler's operator tables, op_table.h, and the trace
// parts, trace_part.h): one document per private file, written whole and atomically, and read
// back or taken (read, then removed) through the checks of private_files.h.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace xlaunch::status {

// Writes `value` as one line of JSON and a newline to the private file `name` in `dir`
// (files::write_private_file). Text that is not UTF-8 is dealt with as `on_bad_utf8` says
// (strict: nlohmann's type_error is thrown). Returns false and sets *why when it cannot be written.
bool write_json_file(const std::string& dir, const std::string& name, const nlohmann::json& value, std::string* why,
                     nlohmann::json::error_handler_t on_bad_utf8 = nlohmann::json::error_handler_t::strict);

// What becomes of a file once its document is accepted.
enum class AfterRead { keep, remove };

// Reads the private file `name` in `dir` (at most 1 GiB: the spans of a long profile of a large
// model run to tens of MB), parses it and returns what `accept` says of it: whether it is the
// document wanted (accept may throw nlohmann::json::exception for a field that is missing or
// mistyped, which counts as no). False when the file cannot be read or is not JSON.
bool read_json_file(const std::string& dir, const std::string& name, AfterRead after,
                    const std::function<bool(const nlohmann::json&)>& accept);

// The document of `rank` in the private file `name`, converted by `from_json` (which throws
// nlohmann::json::exception for a field missing or mistyped); nullopt when there is none, it does
// not convert, or it is another rank's (T::rank).
template <class T>
std::optional<T> read_rank_json(const std::string& dir, const std::string& name, int rank,
                                T (*from_json)(const nlohmann::json&), AfterRead after) {
  std::optional<T> out;
  read_json_file(dir, name, after, [&](const nlohmann::json& j) {
    out = from_json(j);
    if (out->rank != rank) out.reset();
    return out.has_value();
  });
  return out;
}

}  // namespace xlaunch::status
