// `xlaunch env`: everything worth pasting into a bug report, one `name: value` line each, the
// settings the environment sets (XLAUNCH_* variables, which `xlaunch run` takes over the file),
// then the config file in use and its contents. Never fails for a missing library: it says so.
// `xlaunch env --settings_table` prints the settings table as docs/config-reference.md holds it.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "cli/config_in_use.h"
#include "cli/subcommand.h"
#include "launch/launch_error.h"
#include "launch/machine.h"
#include "launch/programs.h"
#include "xlaunch/config/config_error.h"
#include "xlaunch/config/setting.h"

namespace xlaunch::launcher {
namespace {

std::string compiler() {
#if defined(__clang__)
  return "Clang " __clang_version__;
#elif defined(__GNUC__)
  return "GCC " __VERSION__;
#else
  return "unknown";
#endif
}

void print_config(const std::string& cli_value) {
  const auto loc = locate_config(cli_value);
  if (loc.path.empty() || !file_exists(loc.path)) {
    std::cout << "config file: none" << (loc.path.empty() ? "" : " (no file at " + loc.path + ")")
              << "; `xlaunch run` uses built-in defaults\n";
    return;
  }
  std::cout << "config file: " << loc.path << " (from " << config::to_string(loc.origin) << ")\n";
  try {
    const auto loaded = config::load_config(loc.path);
    if (!loaded.unsupported.empty()) {
      std::string s;
      for (const auto& k : loaded.unsupported) s += (s.empty() ? "" : ", ") + k;
      std::cout << "config unsupported (ignored): " << s << "\n";
    }
    std::cout << "config status: valid\n";
  } catch (const config::ConfigError& e) {
    std::cout << "config status: INVALID: " << e.what() << "\n";
  }
  std::ifstream in(loc.path);
  std::stringstream text;
  text << in.rdbuf();
  std::cout << "--- " << loc.path << " ---\n" << text.str();
  if (!text.str().empty() && text.str().back() != '\n') std::cout << "\n";
  std::cout << "---\n";
}

// The rows of the settings table whose variable is set here: `xlaunch run` takes them over the file.
void print_environment_settings() {
  std::string set;
  for (const config::Setting& s : config::settings_table())
    if (s.var)
      if (const char* v = std::getenv(s.var->name))
        set += std::string("  ") + s.var->name + "=" + v + " (" + s.key + ")\n";
  std::cout << "settings from the environment:" << (set.empty() ? " none\n" : "\n" + set);
}

int env(const std::string& config_file) {
  std::string mpi;
  try {
    const OpenMpi m = find_open_mpi(path_env());
    mpi = m.version + " (" + m.mpirun + ")";
  } catch (const LaunchError& e) {
    mpi = std::string("not available: ") + e.what();
  }
  const GpuReport g = detect_gpus();
  std::cout << "xlaunch version: " << XLAUNCH_VERSION << "\n"
            << "compiler: " << compiler() << "\n"
            << "LibTorch: " << XLAUNCH_TORCH_VERSION << " (built against; the launcher does not load it)\n"
            << "CUDA runtime: " << cuda_runtime_version() << "\n"
            << "CUDA driver: " << cuda_driver_version() << (g.driver.empty() ? "" : " (driver " + g.driver + ")") << "\n"
            << "NCCL: " << nccl_version() << "\n"
            << "Open MPI: " << mpi << "\n"
            << "GPUs: " << (g.gpus.empty() ? "none" : std::to_string(g.gpus.size())) << " (via " << g.source << ")\n";
  for (size_t i = 0; i < g.gpus.size(); ++i)
    std::cout << "  GPU " << i << ": " << g.gpus[i].name << ", " << format_bytes(g.gpus[i].memory_bytes) << "\n";
  std::cout << "CPU cores: " << physical_cpu_cores() << " physical, " << usable_cpus() << " usable hardware threads\n"
            << "memory: " << format_bytes(total_memory_bytes()) << "\n";
  print_environment_settings();
  print_config(config_file);
  return 0;
}

}  // namespace

Runner setup_env(CLI::App* cmd) {
  auto config_file = std::make_shared<std::string>();
  auto table = std::make_shared<bool>(false);
  cmd->add_option("--config_file", *config_file, "Config file to show (default: as `xlaunch run` finds it)");
  cmd->add_flag("--settings_table", *table, "Print every setting (key, option, variable, default...) as Markdown");
  return [config_file, table](const Invocation&) {
    if (!*table) return env(*config_file);
    std::cout << config::settings_markdown();
    return 0;
  };
}

}  // namespace xlaunch::launcher
