#include "xlaunch/config/config_error.h"

namespace xlaunch::config {

std::string format_config_error(const ConfigErrorInfo& info) {
  std::string s = info.file.empty() ? std::string("config") : info.file;
  if (info.line > 0) s += ":" + std::to_string(info.line);
  s += ": ";
  if (!info.key.empty()) s += "key '" + info.key + "': ";
  s += "found " + info.found;
  if (!info.allowed.empty()) s += "; allowed: " + info.allowed;
  if (!info.hint.empty()) s += " (" + info.hint + ")";
  return s;
}

ConfigError::ConfigError(ConfigErrorInfo info)
    : std::runtime_error(format_config_error(info)), info_(std::move(info)) {}

}  // namespace xlaunch::config
