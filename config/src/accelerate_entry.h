// What the readers of Accelerate's plugin sections (accelerate_deepspeed.h, accelerate_fsdp.h)
// share: one entry of a section with its key, line and typed readings, and taking a value over
// into xlaunch's own setting.
#pragma once

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <sstream>
#include <string>

#include "schema.h"
#include "xlaunch/config/config_error.h"
#include "xlaunch/config/config_io.h"
#include "xlaunch/config/setting.h"

namespace xlaunch::config::detail {

inline bool is_none(const std::string& s) { return s.empty() || s == "none" || s == "None" || s == "null"; }

inline std::string show(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

[[noreturn]] inline void refuse(const std::string& file, const std::string& key, int line, const std::string& found,
                                const std::string& allowed, const std::string& hint) {
  throw ConfigError({file, key, line, found, allowed, hint});
}

// One key of a plugin section, e.g. deepspeed_config.zero_stage.
struct Entry {
  std::string key;  // "deepspeed_config.zero_stage"
  int line;
  YAML::Node node;  // a handle: the iterator's own is a temporary
  const std::string& file;
  std::string text() const { return node.IsScalar() ? node.Scalar() : ""; }
  [[noreturn]] void fail(const std::string& allowed, const std::string& hint = "") const {
    refuse(file, key, line, describe(node), allowed, hint);
  }
  long integer(long lo, long hi) const {
    const std::string& s = text();
    errno = 0;
    char* end = nullptr;
    const long v = node.IsScalar() ? std::strtol(s.c_str(), &end, 10) : 0;
    if (!node.IsScalar() || s.empty() || *end != '\0' || errno != 0 || v < lo || v > hi)
      fail("an integer from " + std::to_string(lo) + " to " + std::to_string(hi));
    return v;
  }
  bool boolean() const {
    std::string s = text();
    std::transform(s.begin(), s.end(), s.begin(), ::tolower);
    if (s == "true" || s == "yes" || s == "on") return true;
    if (s == "false" || s == "no" || s == "off" || node.IsNull()) return false;
    fail("true or false");
  }
};

// Takes `value` (as the file spells it) for the setting unless the file also set its key itself to
// something else.
inline void take(LoadedConfig& out, const Setting& setting, const std::string& value, const std::string& from, int line) {
  const auto own = out.lines.find(setting.key);
  const std::string shown = setting.text(out.config);
  if (own != out.lines.end() && shown != value)
    refuse(out.file, setting.key, own->second, "'" + shown + "' here, and " + from, "the same value in both",
           "remove one of the two, or make them agree");
  read_setting(out.config, setting.key, value, out.file);
  if (own == out.lines.end()) out.lines[setting.key] = line;
}

}  // namespace xlaunch::config::detail
