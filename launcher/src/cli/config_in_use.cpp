#include "cli/config_in_use.h"

#include <sys/stat.h>

#include "xlaunch/config/config_error.h"

namespace xlaunch::launcher {

bool file_exists(const std::string& path) {
  struct stat st {};
  return !path.empty() && stat(path.c_str(), &st) == 0;
}

std::optional<ConfigInUse> find_accelerate_config(std::optional<int> gpu_count) {
  const std::string path = config::accelerate_default_config_path(config::real_env);
  if (!file_exists(path)) return std::nullopt;
  try {
    // Loaded before the aggregate is built: GCC 12 destroys the members of a half-built aggregate
    // twice when one of its initializers throws.
    config::LoadedConfig loaded = config::load_config(path, gpu_count);
    return ConfigInUse{{path, config::ConfigOrigin::AccelerateDefault}, std::move(loaded)};
  } catch (const config::ConfigError& e) {
    // The user may not know this file is read at all: say why, and how to stop it.
    config::ConfigErrorInfo info = e.info();
    info.hint += std::string(info.hint.empty() ? "" : "; ") +
                 "Accelerate's default config is read because no xlaunch config exists: write one with "
                 "`xlaunch config`, or pass --config_file";
    throw config::ConfigError(info);
  }
}

namespace {

// A file the user named, which must exist.
bool named_by_user(const config::ConfigLocation& l) {
  return l.origin == config::ConfigOrigin::CommandLine || l.origin == config::ConfigOrigin::EnvVar;
}

}  // namespace

config::ConfigLocation locate_config(const std::string& cli_value) {
  const config::ConfigLocation xlaunch = config::resolve_config_path(cli_value, config::real_env);
  if (named_by_user(xlaunch) || file_exists(xlaunch.path)) return xlaunch;
  const std::string accelerate = config::accelerate_default_config_path(config::real_env);
  return file_exists(accelerate) ? config::ConfigLocation{accelerate, config::ConfigOrigin::AccelerateDefault} : xlaunch;
}

ConfigInUse find_config(const std::string& cli_value, std::optional<int> gpu_count) {
  ConfigInUse c;
  c.location = locate_config(cli_value);
  if (c.location.origin == config::ConfigOrigin::AccelerateDefault) return *find_accelerate_config(gpu_count);
  if (named_by_user(c.location) || file_exists(c.location.path))
    c.loaded = config::load_config(c.location.path, gpu_count);
  return c;
}

}  // namespace xlaunch::launcher
