// `xlaunch config` (interactive) and `xlaunch config default` (no questions). Both write the file
// atomically and never replace an existing one unless the user says so. See docs/cli.md.
#include <algorithm>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "cli/config_in_use.h"
#include "cli/overrides.h"
#include "cli/prompt.h"
#include "cli/subcommand.h"
#include "launch/cpu_features.h"
#include "launch/launch_error.h"
#include "launch/machine.h"
#include "xlaunch/config/config_error.h"
#include "xlaunch/config/config_io.h"
#include "xlaunch/config/setting.h"
#include "xlaunch/wrap_policy.h"
#include "xlaunch/zero_stages.h"

namespace xlaunch::launcher {
namespace {

using config::DistributedType;
using config::LaunchConfig;

struct ConfigOptions {
  std::string config_file;          // `xlaunch config --config_file`
  std::string default_config_file;  // `xlaunch config default --config_file`
  bool force = false;
  Overrides overrides;
  CLI::App* default_cmd = nullptr;
};

std::string target_path(const std::string& cli_value) {
  const auto loc = config::resolve_config_path(cli_value, config::real_env);
  if (loc.path.empty())
    throw LaunchError("no place for the config: neither HOME nor XDG_CONFIG_HOME is set; pass --config_file PATH");
  return loc.path;
}

// The problem with a value for `key`, checked by the schema itself; "" when it is fine.
std::string schema_check(const std::string& key, const std::string& value) {
  try {
    config::parse_config(key + ": " + value + "\n", "answer");
  } catch (const config::ConfigError& e) {
    return "is not valid: " + e.info().allowed;
  }
  return "";
}

// The mixed-precision question. On a CPU job (cpu: this machine's CPU) only what pays there is
// offered (cpu_features.h); the rest is named in a note, and with nothing but `no` left the question
// is not asked.
config::MixedPrecision ask_mixed_precision(Prompter& p, config::MixedPrecision proposed, const std::optional<CpuFeatures>& cpu) {
  std::vector<std::string> offered{"no"};
  std::string left_out;
  for (const auto mp : {config::MixedPrecision::Fp16, config::MixedPrecision::Bf16}) {
    if (!cpu || pays_on_cpu(mp, *cpu)) {
      offered.push_back(config::to_string(mp));
      continue;
    }
    left_out += std::string(left_out.empty() ? "" : ", nor ") + config::to_string(mp) + " (" + flags_looked_for(mp) + ")";
    if (proposed == mp) proposed = config::MixedPrecision::No;
  }
  if (!left_out.empty())
    p.note("This CPU has no 16-bit instructions for " + left_out + " among its flags: autocast would run in software, "
           "slower than float32 (measured: bf16 0.05x, fp16 0.06x on such CPUs), so a CPU job is not offered it" +
           (offered.size() == 1 ? "; mixed precision: no" : "") + ". Set mixed_precision in the file to use it anyway.");
  if (offered.size() == 1) return config::MixedPrecision::No;
  const std::string mp = p.choice("Mixed precision?", offered, config::to_string(proposed));
  return mp == "fp16" ? config::MixedPrecision::Fp16 : mp == "bf16" ? config::MixedPrecision::Bf16 : config::MixedPrecision::No;
}

// Sharding, as `accelerate config` asks about FSDP and DeepSpeed: the ZeRO stage, on several
// machines whether to shard within each machine (hybrid sharding, ddp.shard_group), and at stage 3
// which modules are units (fsdp.wrap) and whether a unit is freed after its forward (FSDP's
// FULL_SHARD) or kept whole for backward (SHARD_GRAD_OP). Asked of jobs of several processes.
void ask_sharding(Prompter& p, LaunchConfig& c, const LaunchConfig& proposed) {
  std::vector<std::string> stages;
  std::string meanings;
  for (const ZeroStageInfo& row : kZeroStages) {
    stages.push_back(std::to_string(row.stage));
    meanings += (meanings.empty() ? "" : "; ") + std::to_string(row.stage) + ": " + row.meaning;
  }
  const config::Setting& stage = config::setting_of(env::kZeroStage);
  const std::string answer = p.choice("Shard the training state over the processes? ZeRO stage (" + meanings +
                                          "; 3 is FSDP's FULL_SHARD)",
                                      stages, stage.text(proposed));
  config::read_setting(c, stage.key, answer, "answer");
  // Hybrid sharding (ddp.shard_group): a CPU job over several machines of several processes each
  // (elsewhere it is refused, so not asked: world).
  const config::Setting& group = config::setting_of(env::kShardGroup);
  config::read_setting(c, group.key, "world", "answer");
  if (shards_optimizer_state(c.ddp.zero_stage) && c.distributed_type == DistributedType::MultiCpu &&
      c.num_machines > 1 && c.num_processes >= 2 * c.num_machines) {
    const bool hybrid = p.yes_no(
        "Shard within each machine and keep a replica on every machine? (yes: FSDP's HYBRID_SHARD, parameter "
        "gathers stay inside the machine, each process holds 1/(processes per machine); no: shard over every process)",
        group.text(proposed) == "machine");
    config::read_setting(c, group.key, hybrid ? "machine" : "world", "answer");
  }
  if (!shards_parameters(c.ddp.zero_stage)) return;
  const config::Setting& wrap = config::setting_of(env::kFsdpWrap);
  const std::string units = p.text(
      "Which modules are units, each gathered whole only while it computes? (auto: every Sequential entry and "
      "FullyShard module; none; type:Block,...; name:blocks.*,...; size:N)",
      wrap.text(proposed), [](const std::string& a) {
        return WrapPolicy::valid(a) ? "" : std::string("is not a wrap policy: ") + kWrapPolicySpellings;
      });
  config::read_setting(c, wrap.key, units, "answer");
  const config::Setting& reshard = config::setting_of(env::kFsdpReshardAfterForward);
  const bool free_after_forward =
      p.yes_no("Free each unit's parameters after its forward and gather them again for backward? (yes: FSDP's "
               "FULL_SHARD, least memory; no: SHARD_GRAD_OP, one gather fewer per unit)",
               reshard.text(proposed) == "1");
  config::read_setting(c, reshard.key, free_after_forward ? "true" : "false", "answer");
}

void ask_questions(Prompter& p, LaunchConfig& c, const LaunchConfig& proposed, int gpus, const CpuFeatures& cpu) {
  const std::string type = p.choice("Which kind of training? NO: one process; MULTI_CPU: several CPU processes; "
                                    "MULTI_GPU: one process per GPU",
                                    {"NO", "MULTI_CPU", "MULTI_GPU"}, config::to_string(proposed.distributed_type));
  c.distributed_type = type == "NO" ? DistributedType::No
                       : type == "MULTI_CPU" ? DistributedType::MultiCpu : DistributedType::MultiGpu;
  if (c.distributed_type != DistributedType::No) {
    // N, or MIN:MAX: an elastic job (docs/multi-machine.md#elastic-jobs).
    const std::string machines_answer =
        p.text("How many machines will the job use?", config::machines_string(proposed), [](const std::string& a) {
          int lo = 0, hi = 0;
          return config::parse_machines(a, &lo, &hi) && hi <= 4096
                     ? ""
                     : "is not a whole number from 1 to 4096, nor MIN:MAX (an elastic job that continues on at least "
                       "MIN machines when others are lost)";
        });
    config::parse_machines(machines_answer, &c.min_machines, &c.num_machines);
    if (config::is_elastic(c))
      c.max_restarts = p.integer("How many times may the job restart, on the machines still there (max_restarts)?",
                                 std::max(proposed.max_restarts, 3), 0, 1000000);
    if (c.num_machines > 1) {
      c.machine_rank = p.integer("What is the rank of this machine?", std::min(proposed.machine_rank, c.num_machines - 1),
                                 0, c.num_machines - 1);
      c.main_process_ip = p.text("What is the IP address or host name of the machine of rank 0?", proposed.main_process_ip,
                                 [](const std::string& a) { return a.empty() ? "is empty: an address is needed" : ""; });
      c.main_process_port =
          p.integer("Which port should the main process use? (0: pick a free one)", proposed.main_process_port, 0, 65535);
      c.mpi.hostfile = p.text("Which Open MPI hostfile lists the machines (lines of 'host slots=N')?", proposed.mpi.hostfile,
                              [](const std::string& a) {
                                return a.empty() ? "is empty: mpirun needs the list of machines"
                                       : file_exists(a) ? "" : "does not exist";
                              });
    }
    const int per_machine = c.distributed_type == DistributedType::MultiGpu ? std::max(gpus, 1)
                            : proposed.distributed_type == DistributedType::MultiCpu ? proposed.num_processes : 2;
    const int machines = c.num_machines;
    const bool as_proposed = c.distributed_type == proposed.distributed_type && machines == proposed.num_machines;
    c.num_processes = p.integer("How many processes in total, over all machines?",
                                as_proposed ? proposed.num_processes : per_machine * machines, 1, 65535,
                                [machines](const std::string& a) {
                                  return std::atoi(a.c_str()) % machines == 0
                                             ? ""
                                             : "is not a multiple of the number of machines (" + std::to_string(machines) + ")";
                                });
    if (c.num_processes > 1) ask_sharding(p, c, proposed);
  }
  // Not asked of one process: a stage proposed (an Accelerate DeepSpeed config's) carries over as it is.
  if (c.num_processes <= 1) c.ddp.zero_stage = proposed.ddp.zero_stage;
  if (c.distributed_type == DistributedType::MultiGpu) {
    const std::string ids = p.text("Which GPUs of this machine should be used? ('all', or ids such as 0,1)",
                                   config::gpu_ids_string(proposed.gpu_ids),
                                   [](const std::string& a) { return schema_check("gpu_ids", a); });
    c.gpu_ids = config::parse_config("gpu_ids: " + ids + "\n", "answer").config.gpu_ids;
  }
  if (c.distributed_type == DistributedType::MultiCpu) c.use_cpu = true;
  if (c.distributed_type == DistributedType::No && gpus > 0)
    c.use_cpu = p.yes_no("Train on the CPU only, although this machine has a GPU?", proposed.use_cpu);
  c.mixed_precision = ask_mixed_precision(p, proposed.mixed_precision, cpu_job(c, gpus) ? std::optional(cpu) : std::nullopt);
  const config::Setting& accumulation = config::setting_of(env::kGradAccumSteps);
  const int steps = p.integer("How many gradient accumulation steps?", std::stoi(accumulation.text(proposed)), 1, 1 << 20);
  config::read_setting(c, accumulation.key, std::to_string(steps), "answer");
  c.debug = p.yes_no("Turn on debug checks (slower)?", proposed.debug);
}

// The answers proposed: before the first xlaunch config, Accelerate's default config when there is a
// usable one (an Accelerate user's settings carry over); else what suits this machine.
LaunchConfig starting_defaults(bool first_config, int gpus, int cores) {
  try {
    if (const auto accelerate = first_config ? find_accelerate_config(std::nullopt) : std::nullopt) {
      std::cout << "Starting from Accelerate's config " << accelerate->location.path << "\n";
      return accelerate->loaded->config;
    }
  } catch (const config::ConfigError& e) {
    std::cout << "Not starting from Accelerate's config: " << e.what() << "\n";
  }
  return machine_defaults(gpus, cores);
}

int interactive(const ConfigOptions& o) {
  const std::string path = target_path(o.config_file);
  const GpuReport gpu_report = detect_gpus();
  const int gpus = static_cast<int>(gpu_report.gpus.size());
  const int cores = physical_cpu_cores();
  std::cout << "xlaunch config: writing " << path << "\nThis machine: "
            << (gpus ? std::to_string(gpus) + " GPU(s)" : std::string("no GPU")) << ", " << cores << " CPU core(s).\n"
            << "Press Enter to take the default in brackets.\n";
  Prompter p(std::cin, std::cout);
  try {
    const bool exists = file_exists(path);
    if (exists && !p.yes_no(path + " exists. Replace it?", false)) {
      std::cout << "Left " << path << " unchanged.\n";
      return 0;
    }
    const LaunchConfig proposed = starting_defaults(!exists, gpus, cores);
    LaunchConfig c;
    ask_questions(p, c, proposed, gpus, this_cpu_features());
    config::validate(c, gpus);
    config::save_config(c, path);
  } catch (const Aborted&) {
    std::cout << "\nxlaunch config: end of input, aborted; nothing written.\n";
    return 1;
  }
  std::cout << "Wrote " << path << "\n";
  return 0;
}

int write_default(const ConfigOptions& o) {
  const std::string path = target_path(!o.default_config_file.empty() ? o.default_config_file : o.config_file);
  if (file_exists(path) && !o.force)
    throw LaunchError(path + " already exists; pass --force to replace it, or --config_file to write elsewhere");
  const int gpus = o.overrides.cpu() ? 0 : static_cast<int>(detect_gpus().gpus.size());
  LaunchConfig c = machine_defaults(gpus, physical_cpu_cores());
  apply_overrides(c, o.overrides, gpus);
  config::validate(c, gpus, "command line");
  std::cerr << cpu_mixed_precision_warning(c, gpus);
  config::save_config(c, path);
  std::cout << "Wrote " << path << " (" << config::to_string(c.distributed_type) << ", " << c.num_processes
            << " process(es), mixed precision " << config::to_string(c.mixed_precision) << ")\n";
  return 0;
}

}  // namespace

Runner setup_config(CLI::App* cmd) {
  auto o = std::make_shared<ConfigOptions>();
  cmd->add_option("--config_file", o->config_file, "Where to write (default: $XLAUNCH_CONFIG_FILE, else "
                                                   "${XDG_CONFIG_HOME:-~/.config}/xlaunch/default_config.yaml)");
  cmd->require_subcommand(0, 1);
  o->default_cmd = cmd->add_subcommand("default", "Write a config for this machine without asking anything");
  add_override_options(o->default_cmd, o->overrides);
  o->default_cmd->add_option("--config_file", o->default_config_file, "Where to write");
  o->default_cmd->add_flag("--force", o->force, "Replace an existing file");
  return [o](const Invocation&) { return o->default_cmd->parsed() ? write_default(*o) : interactive(*o); };
}

}  // namespace xlaunch::launcher
