// The one JSON string the report, the timeline and the ranks' timeline parts write: quoted, with
// quotes and backslashes escaped and control characters dropped.
#pragma once

#include <string>

namespace xlaunch::profile {

inline std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    if (static_cast<unsigned char>(ch) >= 0x20) out += ch;
  }
  return out + "\"";
}

}  // namespace xlaunch::profile
