#include "cli/overrides.h"

#include <algorithm>
#include <cstdio>
#include <iomanip>
#include <sstream>
#include <type_traits>

#include "xlaunch/config/config_error.h"
#include "xlaunch/config/setting.h"

namespace xlaunch::launcher {

using config::DistributedType;
using config::LaunchConfig;

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
    "DeepSpeed itself is not used: xlaunch's own ZeRO stages 1, 2 and 3 are ddp.zero_stage in the config "
    "(docs/memory.md), and an Accelerate config's deepspeed_config is read as them";
constexpr const char* kZeroStage = "set ddp.zero_stage: 0, 1, 2 or 3 in the config file (docs/memory.md)";
constexpr const char* kNoOffload =
    "offloading to the CPU or NVMe is not built; ddp.zero_stage: 2 divides the optimizer state and gradients by "
    "the number of ranks instead (docs/memory.md)";
constexpr const char* kNoZero3 = "ZeRO stage 3 is ddp.zero_stage: 3 in the config file, and its options are the "
                                 "fsdp section's (docs/memory.md)";
constexpr const char* kNoFsdp = "FSDP is xlaunch's ddp.zero_stage: 3 (FULL_SHARD) in the config file, with the fsdp "
                                "section's options, and an Accelerate config with distributed_type: FSDP runs as it "
                                "(docs/memory.md)";
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

// How a row's option takes its value: CLI11 reads an int or a number itself (and refuses what is
// not one, before anything else is checked); any other value is text for the file's reading, and
// an enum's is first one of its spellings.
struct OptionKind {
  bool by_hand = false;              // spelled in ways the field's type does not say (MIN:MAX, "all")
  std::vector<std::string> choices;  // ONE_OF's names
};

template <class Names>
OptionKind one_of(const Names& names) {
  return {false, std::vector<std::string>(std::begin(names), std::end(names))};
}

template <class T>
void add_setting_option(CLI::App* app, Overrides& o, const std::string& key, const std::string& names,
                        const std::string& help, const OptionKind& kind) {
  if constexpr (std::is_same_v<T, bool>) {
    app->add_flag(names, o.flags[key], help);
  } else if constexpr (std::is_same_v<T, int>) {
    if (kind.by_hand) app->add_option(names, o.texts[key], help);
    else app->add_option(names, o.ints[key], help);
  } else if constexpr (std::is_same_v<T, double>) {
    app->add_option(names, o.numbers[key], help);
  } else {
    CLI::Option* opt = app->add_option(names, o.texts[key], help);
    if (!std::is_same_v<T, std::string> && !kind.choices.empty()) opt->check(CLI::IsMember(kind.choices));
  }
}

// The option's value as the file would spell it; nullopt when it was not given.
std::optional<std::string> given_text(const Overrides& o, const std::string& key) {
  if (auto it = o.flags.find(key); it != o.flags.end()) return it->second ? std::optional<std::string>("true") : std::nullopt;
  if (auto it = o.ints.find(key); it != o.ints.end() && it->second) return std::to_string(*it->second);
  if (auto it = o.numbers.find(key); it != o.numbers.end() && it->second) {
    std::ostringstream s;
    s << std::setprecision(17) << *it->second;
    return s.str();
  }
  if (auto it = o.texts.find(key); it != o.texts.end()) return it->second;
  return std::nullopt;
}

}  // namespace

bool Overrides::cpu() const {
  const auto it = flags.find(config::setting_of(env::kUseCpu).key);
  return it != flags.end() && it->second;
}

#define XLAUNCH_OPTION_KIND_RANGE(condition, allowed, hint, unused) OptionKind{}
#define XLAUNCH_OPTION_KIND_ANY XLAUNCH_OPTION_KIND_RANGE
#define XLAUNCH_OPTION_KIND_ONE_OF(names, allowed, hint, unused) one_of(names)
#define XLAUNCH_OPTION_KIND_BY_HAND(condition, allowed, hint, unused) OptionKind{true, {}}
#define XLAUNCH_OPTION(names, help, S, name, type, check) \
  add_setting_option<type>(app, o, #S #name, names, help, XLAUNCH_BY_CHECK(check, XLAUNCH_OPTION_KIND_, 0));
#define XLAUNCH_OPTION_ROW(S, name, type, env, dflt, cli, check, runtime, meaning) \
  XLAUNCH_WHEN_CLI(cli, XLAUNCH_OPTION, S, name, type, check)

void add_override_options(CLI::App* app, Overrides& o) {
  XLAUNCH_SETTINGS(XLAUNCH_OPTION_ROW)
  app->add_flag("--multi_gpu", o.multi_gpu, "One process per GPU (distributed_type MULTI_GPU)");
}

#undef XLAUNCH_OPTION_ROW
#undef XLAUNCH_OPTION
#undef XLAUNCH_OPTION_KIND_BY_HAND
#undef XLAUNCH_OPTION_KIND_ONE_OF
#undef XLAUNCH_OPTION_KIND_ANY
#undef XLAUNCH_OPTION_KIND_RANGE

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
  for (const config::Setting& s : config::settings_table()) {
    const std::optional<std::string> text = given_text(o, s.key);
    if (!text) continue;
    config::read_setting(c, s.key, *text, "command line");
    set.push_back(s.key);
  }
  // --deterministic without --cudnn_benchmark: the command line's choice wins over the file's.
  const auto given = [&](const std::string& key) { return std::find(set.begin(), set.end(), key) != set.end(); };
  if (given(config::setting_of(env::kDeterministic).key) && !given(config::setting_of(env::kCudnnBenchmark).key))
    c.cudnn_benchmark = false;
  if (o.multi_gpu) {
    if (o.cpu())
      throw config::ConfigError({"command line", "distributed_type", 0, "--multi_gpu with --cpu",
                                 "one of them", "--multi_gpu trains on GPUs, --cpu on CPUs"});
    c.distributed_type = DistributedType::MultiGpu;
    set.push_back("distributed_type");
    if (c.use_cpu) {  // a MULTI_CPU file's use_cpu would contradict the flag
      c.use_cpu = false;
      set.push_back("use_cpu");
    }
  }
  if (o.cpu()) {
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
