#include "cli/overrides.h"

#include <algorithm>
#include <cstdio>

#include "xlaunch/config/config_error.h"
#include "xlaunch/config/config_io.h"

namespace xlaunch::launcher {

using config::DistributedType;
using config::LaunchConfig;
using config::MixedPrecision;

namespace {

// An `accelerate launch` option xlaunch has no counterpart for, and why.
struct AccelerateOnly {
  const char* names;  // CLI11 spelling: "-t,--tee"
  bool takes_value;
  const char* why;
};

constexpr const char* kNoRendezvous = "mpirun starts and connects every rank; there is no torchrun rendezvous";
constexpr const char* kNoDynamo = "the training program is compiled C++; there is no torch.compile to configure";

// Accepted and ignored with a warning: they tune machinery xlaunch does not use.
constexpr AccelerateOnly kIgnored[] = {
    {"-q,--quiet", false, "xlaunch prints no Python stack traces to silence"},
    {"--no_python", false, "xlaunch always runs the training program directly"},
    {"--same_network", false, "mpirun reaches the other machines itself"},
    {"--rdzv_backend", true, kNoRendezvous},
    {"--rdzv_conf", true, kNoRendezvous},
    {"--role", true, kNoRendezvous},
    {"--monitor_interval", true, "xlaunch learns at once, through mpirun, when a rank ends"},
    {"-t,--tee", true, "every rank's output comes to this terminal; --log_dir keeps per-rank logs"},
    {"--mpirun_ccl", true, "oneCCL is not used: CPU ranks reduce through MPI or shared memory"},
    {"--enable_cpu_affinity", false, "ranks are bound to cores by mpi.bind_to in the config"},
    {"--dynamo_backend", true, kNoDynamo},
    {"--dynamo_mode", true, kNoDynamo},
    {"--dynamo_use_fullgraph", false, kNoDynamo},
    {"--dynamo_use_dynamic", false, kNoDynamo},
};

// An `accelerate launch` option refused: `name` exactly, or every option starting with `name`
// when `prefix` (so options Accelerate adds to a family later are refused by name too).
struct Refused {
  const char* name;
  bool prefix;
  const char* why;
};

constexpr const char* kNoPython =
    "it runs a Python module, and xlaunch has no Python: pass the training program itself, "
    "as in `xlaunch launch [options] ./train [args...]`";
constexpr const char* kNoTpu = "xlaunch trains on CPUs and NVIDIA GPUs; TPUs are not supported";
constexpr const char* kNoDeepSpeed =
    "DeepSpeed itself is not used: xlaunch's own ZeRO stages 1 and 2 are ddp.zero_stage in the config "
    "(docs/memory.md), and an Accelerate config's deepspeed_config is read as them";
constexpr const char* kZeroStage = "set ddp.zero_stage: 0, 1 or 2 in the config file (docs/memory.md)";
constexpr const char* kNoOffload =
    "offloading to the CPU or NVMe is not built; ddp.zero_stage: 2 divides the optimizer state and gradients by "
    "the number of ranks instead (docs/memory.md)";
constexpr const char* kNoZero3 = "ZeRO stage 3 is not built; ddp.zero_stage 1 or 2 shards the optimizer state "
                                 "(and the gradients) over the ranks (docs/memory.md)";
constexpr const char* kNoFsdp = "FSDP is not supported; xlaunch trains data-parallel, every rank holding the whole model";
constexpr const char* kNoMegatron = "Megatron-LM is not supported; xlaunch trains data-parallel";
constexpr const char* kNoParallelism = "only data parallelism is supported (no tensor, context or sharded parallelism)";

constexpr Refused kRefused[] = {
    {"-m", false, kNoPython},
    {"--module", false, kNoPython},
    {"--tpu", false, kNoTpu},
    {"--tpu_", true, kNoTpu},
    {"--no_tpu_cluster", false, kNoTpu},
    {"--vm", false, kNoTpu},
    {"--env", false, kNoTpu},
    {"--main_training_function", false, kNoTpu},
    {"--downcast_bf16", false, kNoTpu},
    {"--ipex", false, "Intel Extension for PyTorch is not supported"},
    {"--use_xpu", false, "Intel XPUs are not supported"},
    {"--use_deepspeed", false, kNoDeepSpeed},
    {"--deepspeed_", true, kNoDeepSpeed},
    {"--zero_stage", false, kZeroStage},
    {"--zero3_", true, kNoZero3},
    {"--offload_", true, kNoOffload},
    {"--gradient_clipping", false,
     "xlaunch has no clipping setting: call acc.clip_grad_norm_(params, max_norm) before the optimizer step"},
    {"--use_fsdp", false, kNoFsdp},
    {"--fsdp_", true, kNoFsdp},
    {"--use_megatron_lm", false, kNoMegatron},
    {"--megatron_lm_", true, kNoMegatron},
    {"--use_parallelism_config", false, kNoParallelism},
    {"--parallelism_config_", true, kNoParallelism},
    {"--fp8_", true, "fp8 training is not supported; use --mixed_precision bf16 or fp16"},
    {"--aws_", true, "Amazon SageMaker is not supported; xlaunch runs on the machines you start it on"},
};

// "-t,--tee" -> "--tee": the name messages use.
std::string long_name(const char* names) {
  const std::string s = names;
  const size_t comma = s.rfind(',');
  return comma == std::string::npos ? s : s.substr(comma + 1);
}

// Why xlaunch does not have Accelerate's option `name`; nullptr when it is not one of them.
const char* accelerate_only_reason(const std::string& name) {
  for (const Refused& r : kRefused)
    if (r.prefix ? name.rfind(r.name, 0) == 0 : name == r.name) return r.why;
  for (const AccelerateOnly& a : kIgnored)
    if (name == long_name(a.names) || std::string(a.names).find(name + ",") == 0) return a.why;
  return nullptr;
}

// The option a command-line word names: "--fsdp_version=2" -> "--fsdp_version"; "" for a value.
std::string option_name(const std::string& word) {
  if (word.size() < 2 || word[0] != '-') return "";
  return word[1] == '-' ? word.substr(0, word.find('=')) : word.substr(0, 2);
}

// Accelerate also accepts --num-processes for --num_processes; xlaunch has one spelling.
std::string underscored(const std::string& name) {
  std::string s = name;
  std::replace(s.begin() + 2, s.end(), '-', '_');
  return s;
}

// The subcommand the words choose ("config default" -> default), or `app` itself.
const CLI::App& chosen_subcommand(const CLI::App& app, const std::vector<std::string>& words) {
  const CLI::App* current = &app;
  for (const std::string& word : words) {
    const auto subs = current->get_subcommands([&](const CLI::App* s) { return s->check_name(word); });
    if (!subs.empty()) current = subs.front();
  }
  return *current;
}

// A key's value as the config file reads it, so both accept and refuse the same values. `context`:
// other keys the check of this one needs (set to harmless values).
config::LaunchConfig parse_as_file(const std::string& key, const std::string& value, const std::string& context = "") {
  std::string quoted = "'";
  for (char ch : value) quoted += ch == '\'' ? std::string("''") : std::string(1, ch);
  try {
    return config::parse_config(key + ": " + quoted + "'\n" + context, "command line").config;
  } catch (const config::ConfigError& e) {
    config::ConfigErrorInfo info = e.info();
    info.line = 0;
    throw config::ConfigError(info);
  }
}

std::vector<int> parse_gpu_ids(const std::string& value) { return parse_as_file("gpu_ids", value).gpu_ids; }
// (project_dir is checked against the merged config afterwards.)
std::vector<std::string> parse_log_with(const std::string& value) {
  return parse_as_file("log_with", value, "project_dir: x\n").log_with;
}

}  // namespace

void add_override_options(CLI::App* app, Overrides& o) {
  app->add_option("-n,--num_processes", o.num_processes, "Processes in total, over all machines");
  app->add_option("--num_machines", o.num_machines,
                  "Machines the job runs on: N, or MIN:MAX to continue on at least MIN when machines are lost "
                  "(with --max_restarts)");
  app->add_option("--machine_rank", o.machine_rank, "Rank of this machine, 0 to num_machines - 1");
  app->add_option("--main_process_ip", o.main_process_ip, "Address of the machine of rank 0");
  app->add_option("--main_process_port", o.main_process_port, "Port on the main machine; 0 picks a free one");
  app->add_option("--gpu_ids", o.gpu_ids, "GPUs of this machine: 'all', or ids such as 0,1");
  app->add_option("--mixed_precision", o.mixed_precision, "no, fp16 or bf16")
      ->check(CLI::IsMember({"no", "fp16", "bf16"}));
  app->add_option("--gradient_accumulation_steps", o.gradient_accumulation_steps,
                  "Micro-steps per optimizer step");
  app->add_option("--num_cpu_threads_per_process", o.num_cpu_threads_per_process,
                  "Intra-op threads of each rank (OMP_NUM_THREADS); 0: cores / ranks of the machine");
  app->add_option("--max_restarts", o.max_restarts, "Restart a failed job up to this many times");
  app->add_option("--max_machine_failures", o.max_machine_failures,
                  "Elastic jobs: keep out a machine at fault in this many failed attempts");
  app->add_option("--hostfile,--mpirun_hostfile", o.hostfile, "Open MPI hostfile listing the machines");
  app->add_option("--log_dir", o.log_dir, "Directory for per-rank logs");
  app->add_option("--trace", o.trace_dir, "Write a timeline of every rank (DIR/trace.json) and DIR/report.html");
  app->add_option("--profile_ops", o.profile_ops,
                  "Profile N optimizer steps after the warm-up operator by operator: the report's operator table");
  app->add_flag("--record_shapes", o.record_shapes, "The operator profile records input shapes");
  app->add_flag("--cudnn_benchmark", o.cudnn_benchmark, "cuDNN autotunes its algorithms for each new input shape");
  app->add_flag("--deterministic", o.deterministic,
                "Deterministic algorithms only (cuDNN's too); operations without one fail, naming themselves");
  app->add_option("--project_dir", o.project_dir,
                  "Project directory: named checkpoints go to DIR/checkpoints, --resume continues from them");
  app->add_option("--log_with", o.log_with,
                  "Trackers acc.log writes to, in project_dir: tensorboard, jsonl, csv, all, or a comma list");
  app->add_option("--report_interval", o.report_interval,
                  "With a tracker on: log the ranks' utilization every N optimizer steps");
  app->add_option("--checkpoint_total_limit", o.checkpoint_total_limit,
                  "Named checkpoints kept in project_dir (the newest); 0: all");
  app->add_option("--checkpoint_every_n_steps", o.checkpoint_every_n_steps,
                  "Save a named checkpoint every N optimizer steps; 0: never");
  app->add_flag("--checkpoint_every_epoch", o.checkpoint_every_epoch, "Save a named checkpoint after every epoch");
  app->add_option("--preempt_signal", o.preempt_signal,
                  "The signal that means the job is being preempted: SIGTERM (default) or SIGUSR1");
  app->add_option("--preempt_timeout_s", o.preempt_timeout_s,
                  "Seconds the ranks have to checkpoint and stop after a preemption before the job is ended");
  app->add_flag("--multi_gpu", o.multi_gpu, "One process per GPU (distributed_type MULTI_GPU)");
  app->add_flag("--cpu,--use_cpu", o.cpu, "Train on CPUs even where GPUs exist");
  app->add_flag("--debug", o.debug, "Extra consistency checks and verbose runtime logging");
}

void add_ignored_accelerate_options(CLI::App* app, Overrides& o) {
  const std::string group = "Accelerate options that mean nothing here (ignored, with a warning)";
  for (const AccelerateOnly& a : kIgnored) {
    const std::string name = long_name(a.names);
    CLI::Option* opt =
        a.takes_value ? app->add_option(a.names)->each([&o, name](const std::string&) { o.ignored.push_back(name); })
                      : app->add_flag_callback(a.names, [&o, name] { o.ignored.push_back(name); });
    opt->description(a.why)->group(group);
  }
}

void warn_ignored_accelerate_options(const Overrides& o) {
  for (const std::string& name : o.ignored)
    std::fprintf(stderr, "xlaunch: warning: %s is an Accelerate option that means nothing here (%s); ignored\n",
                 name.c_str(), accelerate_only_reason(name));
}

std::string accelerate_option_refusal(const CLI::App& app, const std::vector<std::string>& words) {
  const CLI::App& sub = chosen_subcommand(app, words);
  for (const std::string& word : words) {
    const std::string name = option_name(word);
    if (name.empty() || sub.get_option_no_throw(name)) continue;
    const std::string canonical = name[1] == '-' ? underscored(name) : name;
    if (canonical != name && sub.get_option_no_throw(canonical))
      return name + ": xlaunch spells its options with underscores only; use " + canonical;
    if (const char* why = accelerate_only_reason(canonical))
      return name + " is an Accelerate option xlaunch does not have: " + why;
  }
  return "";
}

bool refuse_accelerate_option(const CLI::App& app, const CLI::ParseError& e, const std::vector<std::string>& words) {
  if (e.get_exit_code() == 0) return false;  // --help, --version
  const std::string refusal = accelerate_option_refusal(app, words);
  if (!refusal.empty()) std::fprintf(stderr, "xlaunch: error: %s\n", refusal.c_str());
  return !refusal.empty();
}

std::vector<std::string> apply_overrides(LaunchConfig& c, const Overrides& o, int gpu_count) {
  std::vector<std::string> set;
  auto take = [&](const auto& opt, auto& field, const char* key) {
    if (!opt) return;
    field = *opt;
    set.push_back(key);
  };
  take(o.num_processes, c.num_processes, "num_processes");
  if (o.num_machines) {
    if (!config::parse_machines(*o.num_machines, &c.min_machines, &c.num_machines))
      throw config::ConfigError({"command line", "num_machines", 0, "'" + *o.num_machines + "'",
                                 "an integer >= 1, or MIN:MAX for an elastic job (e.g. 2:4, MIN <= MAX)"});
    set.push_back("num_machines");
  }
  take(o.machine_rank, c.machine_rank, "machine_rank");
  take(o.main_process_ip, c.main_process_ip, "main_process_ip");
  take(o.main_process_port, c.main_process_port, "main_process_port");
  take(o.gradient_accumulation_steps, c.gradient_accumulation_steps, "gradient_accumulation_steps");
  take(o.num_cpu_threads_per_process, c.num_cpu_threads_per_process, "num_cpu_threads_per_process");
  take(o.max_restarts, c.max_restarts, "max_restarts");
  take(o.max_machine_failures, c.max_machine_failures, "max_machine_failures");
  take(o.hostfile, c.mpi.hostfile, "mpi.hostfile");
  take(o.log_dir, c.log_dir, "log_dir");
  take(o.trace_dir, c.trace_dir, "trace_dir");
  take(o.profile_ops, c.profile_ops, "profile_ops");
  auto set_flag = [&](bool given, bool& field, const char* key) {
    if (!given) return;
    field = true;
    set.push_back(key);
  };
  set_flag(o.record_shapes, c.record_shapes, "record_shapes");
  set_flag(o.cudnn_benchmark, c.cudnn_benchmark, "cudnn_benchmark");
  set_flag(o.deterministic, c.deterministic, "deterministic");
  if (o.deterministic && !o.cudnn_benchmark) c.cudnn_benchmark = false;  // the command line's choice wins
  take(o.project_dir, c.project_dir, "project_dir");
  take(o.report_interval, c.report_interval, "report_interval");
  if (o.log_with) {
    c.log_with = parse_log_with(*o.log_with);
    set.push_back("log_with");
  }
  take(o.checkpoint_total_limit, c.checkpoint.total_limit, "checkpoint.total_limit");
  take(o.checkpoint_every_n_steps, c.checkpoint.every_n_steps, "checkpoint.every_n_steps");
  take(o.preempt_signal, c.preempt_signal, "preempt_signal");
  take(o.preempt_timeout_s, c.preempt_timeout_s, "preempt_timeout_s");
  if (o.checkpoint_every_epoch) {
    c.checkpoint.every_epoch = true;
    set.push_back("checkpoint.every_epoch");
  }
  if (o.gpu_ids) {
    c.gpu_ids = parse_gpu_ids(*o.gpu_ids);
    set.push_back("gpu_ids");
  }
  if (o.debug) {
    c.debug = true;
    set.push_back("debug");
  }
  if (o.mixed_precision) {
    const std::string& m = *o.mixed_precision;
    c.mixed_precision = m == "fp16" ? MixedPrecision::Fp16 : m == "bf16" ? MixedPrecision::Bf16 : MixedPrecision::No;
    set.push_back("mixed_precision");
  }
  if (o.multi_gpu) {
    if (o.cpu)
      throw config::ConfigError({"command line", "distributed_type", 0, "--multi_gpu with --cpu",
                                 "one of them", "--multi_gpu trains on GPUs, --cpu on CPUs"});
    c.distributed_type = DistributedType::MultiGpu;
    set.push_back("distributed_type");
    if (c.use_cpu) {  // a MULTI_CPU file's use_cpu would contradict the flag
      c.use_cpu = false;
      set.push_back("use_cpu");
    }
  }
  if (o.cpu) {
    c.use_cpu = true;
    set.push_back("use_cpu");
    if (c.distributed_type == DistributedType::MultiGpu) {
      c.distributed_type = DistributedType::MultiCpu;
      set.push_back("distributed_type");
    }
  }
  if ((c.num_processes > 1 || c.num_machines > 1) && c.distributed_type == DistributedType::No) {
    c.distributed_type = c.use_cpu || gpu_count == 0 ? DistributedType::MultiCpu : DistributedType::MultiGpu;
    set.push_back("distributed_type");
  }
  return set;
}

LaunchConfig machine_defaults(int gpu_count, int cpu_cores) {
  LaunchConfig c;
  if (gpu_count > 0) {
    c.distributed_type = gpu_count > 1 ? DistributedType::MultiGpu : DistributedType::No;
    c.num_processes = gpu_count;
  } else {
    c.distributed_type = cpu_cores > 1 ? DistributedType::MultiCpu : DistributedType::No;
    c.num_processes = cpu_cores > 1 ? cpu_cores : 1;
    c.use_cpu = cpu_cores > 1;
  }
  return c;
}

}  // namespace xlaunch::launcher
