#include "xlaunch/config/config_path.h"

#include <cstdlib>

namespace xlaunch::config {

namespace {

// The value of a variable that is set and not empty.
std::optional<std::string> set_in(const EnvLookup& env, const char* name) {
  auto v = env(name);
  return v && !v->empty() ? v : std::nullopt;
}

}  // namespace

ConfigLocation resolve_config_path(const std::string& cli_value, const EnvLookup& env) {
  if (!cli_value.empty()) return {cli_value, ConfigOrigin::CommandLine};
  auto set = [&](const char* name) { return set_in(env, name); };
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

std::string accelerate_default_config_path(const EnvLookup& env) {
  std::string hf_home;
  if (auto hf = set_in(env, "HF_HOME")) {
    hf_home = *hf;
  } else if (auto cache = set_in(env, "XDG_CACHE_HOME")) {
    hf_home = *cache + "/huggingface";
  } else if (auto home = set_in(env, "HOME")) {
    hf_home = *home + "/.cache/huggingface";
  } else {
    return "";
  }
  return hf_home + "/accelerate/default_config.yaml";
}

const char* to_string(ConfigOrigin o) {
  switch (o) {
    case ConfigOrigin::CommandLine: return "--config_file";
    case ConfigOrigin::EnvVar: return "XLAUNCH_CONFIG_FILE";
    case ConfigOrigin::DefaultLocation: return "default location";
    case ConfigOrigin::AccelerateDefault: return "Accelerate's default config, as no xlaunch config exists";
    case ConfigOrigin::None: return "none";
  }
  return "?";
}

std::optional<std::string> real_env(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  return v ? std::optional<std::string>(v) : std::nullopt;
}

}  // namespace xlaunch::config
