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

// A file named by --config_file or XLAUNCH_CONFIG_FILE must exist; a missing file at the default
// location means built-in defaults. Throws ConfigError for a file that does not load.
ConfigInUse find_config(const std::string& cli_value, std::optional<int> gpu_count);

bool file_exists(const std::string& path);

}  // namespace xlaunch::launcher
