#include "config_in_use.h"

#include <sys/stat.h>

namespace xlaunch::launcher {

bool file_exists(const std::string& path) {
  struct stat st {};
  return !path.empty() && stat(path.c_str(), &st) == 0;
}

ConfigInUse find_config(const std::string& cli_value, std::optional<int> gpu_count) {
  ConfigInUse c;
  c.location = config::resolve_config_path(cli_value, config::real_env);
  const bool explicit_file = c.location.origin == config::ConfigOrigin::CommandLine ||
                             c.location.origin == config::ConfigOrigin::EnvVar;
  if (explicit_file || file_exists(c.location.path)) c.loaded = config::load_config(c.location.path, gpu_count);
  return c;
}

}  // namespace xlaunch::launcher
