// The status directory's JSON files (the profiler's operator tables, op_table.h, and the trace
// parts, trace_part.h): one document per private file, written whole and atomically, and read
// back or taken (read, then removed) through the checks of private_files.h.
#pragma once

#include <functional>
#include <string>

#include <nlohmann/json.hpp>

namespace xlaunch::status {

// Writes `value` as one line of JSON and a newline to the private file `name` in `dir`
// (files::write_private_file). Text that is not UTF-8 is dealt with as `on_bad_utf8` says
// (strict: nlohmann's type_error is thrown). Returns false and sets *why when it cannot be written.
bool write_json_file(const std::string& dir, const std::string& name, const nlohmann::json& value, std::string* why,
                     nlohmann::json::error_handler_t on_bad_utf8 = nlohmann::json::error_handler_t::strict);

// Whether the document wanted is the one read: may throw nlohmann::json::exception for a field that
// is missing or mistyped, which counts as false.
using AcceptJson = std::function<bool(const nlohmann::json&)>;

// Reads the private file `name` in `dir` (at most 1 GiB: the spans of a long profile of a large
// model run to tens of MB), parses it and returns what `accept` says of it; false when the file
// cannot be read or is not JSON.
bool read_json_file(const std::string& dir, const std::string& name, const AcceptJson& accept);

// read_json_file, and then the file is removed when it was accepted.
bool take_json_file(const std::string& dir, const std::string& name, const AcceptJson& accept);

}  // namespace xlaunch::status
