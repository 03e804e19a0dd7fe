// The config settings that command-line options can override, shared by `xlaunch run` and
// `xlaunch config default`, and how `xlaunch run` treats the options of `accelerate launch`.
// Precedence: command line > XLAUNCH_* variables > config file > built-in defaults (settings.h).
#pragma once

#include <CLI/CLI.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "xlaunch/config/launch_config.h"

namespace xlaunch::launcher {

struct Overrides {
  // The values of the settings table's options (xlaunch/settings.h), by key, as CLI11 reads them:
  // an int, a number, a flag (a bool row: given means true), or text the file's reading takes.
  std::map<std::string, std::optional<int>> ints;
  std::map<std::string, std::optional<double>> numbers;
  std::map<std::string, std::optional<std::string>> texts;
  std::map<std::string, bool> flags;
  bool multi_gpu = false;
  std::vector<std::string> ignored;  // Accelerate options given that mean nothing here, by name

  // --cpu (or --use_cpu) given.
  bool cpu() const;
};

// Adds an option for each row of the settings table that has one, spelled as `accelerate launch`
// spells it where Accelerate has it (-n/--num_processes, --gpu_ids, --mixed_precision, --cpu/
// --use_cpu, --mpirun_hostfile...), with the row's help; and --multi_gpu (distributed_type
// MULTI_GPU).
void add_override_options(CLI::App* app, Overrides& o);

// Adds the `accelerate launch` options that xlaunch accepts and ignores with a warning (--quiet,
// --same_network, --rdzv_backend, --dynamo_backend, ...); each one given is recorded in o.ignored.
void add_ignored_accelerate_options(CLI::App* app, Overrides& o);

// Prints one warning per ignored Accelerate option in o.ignored, saying why it means nothing here.
void warn_ignored_accelerate_options(const Overrides& o);

// For a command line CLI11 refused: when one of `words` (the options before the training binary) is
// an `accelerate launch` option xlaunch does not have (--use_fsdp, -m/--module, --zero_stage...) or
// Accelerate's hyphenated spelling of an option of `app` (--num-processes), the message that names
// it and says why; "" when none is, so CLI11's own message stands.
std::string accelerate_option_refusal(const CLI::App& app, const std::vector<std::string>& words);

// main's hook for a ParseError from `app`: prints accelerate_option_refusal's message and returns
// true when there is one (the caller exits with 2); false leaves the error to CLI11.
bool refuse_accelerate_option(const CLI::App& app, const CLI::ParseError& e, const std::vector<std::string>& words);

// Applies the options given to c, read as the file reads the key, and returns the keys they set,
// in the table's order. Then settles distributed_type:
// --multi_gpu makes it MULTI_GPU; --cpu turns MULTI_GPU into MULTI_CPU; several processes with NO
// become MULTI_CPU (no GPU, or --cpu) or MULTI_GPU. Throws ConfigError for --multi_gpu with --cpu
// and for a value the key's reading refuses (--gpu_ids 0,x). Ranges are left to config::validate().
std::vector<std::string> apply_overrides(config::LaunchConfig& c, const Overrides& o, int gpu_count);

// What `xlaunch config` proposes on a machine with these GPUs and cores: one process per GPU
// (MULTI_GPU, or NO for one GPU), else MULTI_CPU with one process per core (NO for one core).
config::LaunchConfig machine_defaults(int gpu_count, int cpu_cores);

}  // namespace xlaunch::launcher
