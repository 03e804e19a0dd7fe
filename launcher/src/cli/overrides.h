// The config settings that command-line options can override, shared by `xlaunch run` and
// `xlaunch config default`, and how `xlaunch run` treats the options of `accelerate launch`.
// Precedence: command line > config file > built-in defaults.
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <vector>

#include "xlaunch/config/launch_config.h"

namespace xlaunch::launcher {

struct Overrides {
  std::optional<int> num_processes, machine_rank, main_process_port, gradient_accumulation_steps,
      num_cpu_threads_per_process, max_restarts, max_machine_failures, checkpoint_total_limit,
      checkpoint_every_n_steps, preempt_timeout_s, report_interval, profile_ops;
  std::optional<std::string> num_machines, main_process_ip, mixed_precision, hostfile, log_dir, gpu_ids, trace_dir,
      project_dir, preempt_signal, log_with;
  bool cpu = false, multi_gpu = false, debug = false, checkpoint_every_epoch = false, record_shapes = false,
       cudnn_benchmark = false, deterministic = false;
  std::vector<std::string> ignored;  // Accelerate options given that mean nothing here, by name
};

// Adds the options that set config keys, spelled as `accelerate launch` spells them: -n/
// --num_processes, --num_machines (N, or MIN:MAX as torchrun's --nnodes), --machine_rank, --main_process_ip, --main_process_port,
// --gpu_ids, --mixed_precision, --gradient_accumulation_steps, --num_cpu_threads_per_process,
// --max_restarts, --debug, --multi_gpu, --cpu/--use_cpu, --hostfile/--mpirun_hostfile, --log_dir;
// and --trace DIR (trace_dir), --max_machine_failures, --project_dir, --log_with, --report_interval, --checkpoint_total_limit,
// --checkpoint_every_n_steps, --checkpoint_every_epoch (checkpoint.*), --preempt_signal,
// --preempt_timeout_s, --profile_ops N, --record_shapes, --cudnn_benchmark, --deterministic.
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

// Applies the options given to c and returns the keys they set. Then settles distributed_type:
// --multi_gpu makes it MULTI_GPU; --cpu turns MULTI_GPU into MULTI_CPU; several processes with NO
// become MULTI_CPU (no GPU, or --cpu) or MULTI_GPU. Throws ConfigError for --multi_gpu with --cpu
// and for a malformed --gpu_ids or --num_machines. Ranges are left to config::validate().
std::vector<std::string> apply_overrides(config::LaunchConfig& c, const Overrides& o, int gpu_count);

// What `xlaunch config` proposes on a machine with these GPUs and cores: one process per GPU
// (MULTI_GPU, or NO for one GPU), else MULTI_CPU with one process per core (NO for one core).
config::LaunchConfig machine_defaults(int gpu_count, int cpu_cores);

}  // namespace xlaunch::launcher
