// The config a command works with: where the file is (config_path.h), and what it holds, or the
// built-in defaults when there is no file at the default location.
#pragma once

#include <optional>
#include <string>

#include "xlaunch/config/config_io.h"
#include "xlaunch/config/config_path.h"

namespace xlaunch::launcher {

struct ConfigInUse {
  config::ConfigLocation location;
  std::optional<config::LoadedConfig> loaded;  // nullopt: no file, built-in defaults
};

// The file a command reads: config_path.h's, or Accelerate's default config when xlaunch's default
// location holds no file and Accelerate's does (origin AccelerateDefault).
config::ConfigLocation locate_config(const std::string& cli_value);

// A file named by --config_file or XLAUNCH_CONFIG_FILE must exist. When xlaunch's default location
// holds no file, Accelerate's default config is used if it exists (origin AccelerateDefault), so an
// Accelerate user's `accelerate config` carries over; else built-in defaults. Throws ConfigError
// for a file that does not load.
ConfigInUse find_config(const std::string& cli_value, std::optional<int> gpu_count);

// Accelerate's default config, when it exists: what `xlaunch config` proposes before any xlaunch
// config has been written. Throws ConfigError for a file that does not load.
std::optional<ConfigInUse> find_accelerate_config(std::optional<int> gpu_count);

bool file_exists(const std::string& path);

}  // namespace xlaunch::launcher
