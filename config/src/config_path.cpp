#include "xlaunch/config/config_path.h"

#include <cstdlib>

namespace xlaunch::config {

ConfigLocation resolve_config_path(const std::string& cli_value, const EnvLookup& env) {
  if (!cli_value.empty()) return {cli_value, ConfigOrigin::CommandLine};
  auto set = [&](const char* name) {
    auto v = env(name);
    return v && !v->empty() ? v : std::nullopt;
  };
  if (auto p = set("XLAUNCH_CONFIG_FILE")) return {*p, ConfigOrigin::EnvVar};
  std::string base;
  if (auto xdg = set("XDG_CONFIG_HOME")) {
    base = *xdg;
  } else if (auto home = set("HOME")) {
    base = *home + "/.config";
  } else {
    return {"", ConfigOrigin::None};
  }
  return {base + "/xlaunch/default_config.yaml", ConfigOrigin::DefaultLocation};
}

const char* to_string(ConfigOrigin o) {
  switch (o) {
    case ConfigOrigin::CommandLine: return "--config_file";
    case ConfigOrigin::EnvVar: return "XLAUNCH_CONFIG_FILE";
    case ConfigOrigin::DefaultLocation: return "default location";
    case ConfigOrigin::None: return "none";
  }
  return "?";
}

std::optional<std::string> real_env(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  return v ? std::optional<std::string>(v) : std::nullopt;
}

}  // namespace xlaunch::config
