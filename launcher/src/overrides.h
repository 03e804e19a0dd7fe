// The config settings that command-line options can override, shared by `xlaunch run` and
// `xlaunch config default`. Precedence: command line > config file > built-in defaults.
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <vector>

#include "xlaunch/config/launch_config.h"

namespace xlaunch::launcher {

struct Overrides {
  std::optional<int> num_processes, num_machines, machine_rank, main_process_port, gradient_accumulation_steps;
  std::optional<std::string> main_process_ip, mixed_precision, hostfile, log_dir;
  bool cpu = false;
};

// Adds --num_processes/-n, --num_machines, --machine_rank, --main_process_ip, --main_process_port,
// --mixed_precision, --gradient_accumulation_steps, --hostfile, --log_dir and --cpu to `app`.
void add_override_options(CLI::App* app, Overrides& o);

// Applies the options given to c and returns the keys they set. Then settles distributed_type:
// --cpu turns MULTI_GPU into MULTI_CPU; several processes with NO become MULTI_CPU (no GPU, or
// --cpu) or MULTI_GPU. Ranges are left to config::validate().
std::vector<std::string> apply_overrides(config::LaunchConfig& c, const Overrides& o, int gpu_count);

// What `xlaunch config` proposes on a machine with these GPUs and cores: one process per GPU
// (MULTI_GPU, or NO for one GPU), else MULTI_CPU with one process per core (NO for one core).
config::LaunchConfig machine_defaults(int gpu_count, int cpu_cores);

}  // namespace xlaunch::launcher
