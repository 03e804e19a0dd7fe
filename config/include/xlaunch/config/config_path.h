// Where the config file comes from: --config_file, else $XLAUNCH_CONFIG_FILE, else
// ${XDG_CONFIG_HOME:-$HOME/.config}/xlaunch/default_config.yaml. When that last one does not exist,
// the launcher falls back to Accelerate's own default config (accelerate_default_config_path).
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace xlaunch::config {

enum class ConfigOrigin { CommandLine, EnvVar, DefaultLocation, AccelerateDefault, None };

struct ConfigLocation {
  std::string path;  // empty when origin is None (no HOME and no XDG_CONFIG_HOME)
  ConfigOrigin origin = ConfigOrigin::None;
};

// Returns the value of an environment variable, or nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

// Pure: the file to use, from the --config_file value (empty: not given) and the environment.
// Empty environment values count as unset.
ConfigLocation resolve_config_path(const std::string& cli_value, const EnvLookup& env);

// Where `accelerate config` writes: $HF_HOME/accelerate/default_config.yaml, else
// ${XDG_CACHE_HOME:-$HOME/.cache}/huggingface/accelerate/default_config.yaml, as Accelerate
// resolves it. Empty when neither HF_HOME, XDG_CACHE_HOME nor HOME is set.
std::string accelerate_default_config_path(const EnvLookup& env);

// "--config_file", "XLAUNCH_CONFIG_FILE", "default location", ...: for messages.
const char* to_string(ConfigOrigin o);

// EnvLookup over the real process environment.
std::optional<std::string> real_env(const std::string& name);

}  // namespace xlaunch::config
