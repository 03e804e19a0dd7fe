// The LaunchConfig schema: every setting `xlaunch run` reads from a config file, with its default.
// Its fields are generated from the settings table (xlaunch/settings.h: key, type, default and
// meaning of each); config_io.h loads, validates and saves it, setting.h lists the rows.
//
// Key names and meanings follow Accelerate's default_config.yaml where the concept exists
// (docs/config-reference.md lists every key with its Accelerate equivalent). xlaunch's own
// settings live in the mpi, ddp and loader sections.
#pragma once

#include <string>
#include <vector>

#include "xlaunch/env_vars.h"
#include "xlaunch/mixed_precision.h"
#include "xlaunch/settings.h"

namespace xlaunch::config {

using settings::kConfigVersion;
using settings::kPreemptSignals;

enum class DistributedType { No, MultiCpu, MultiGpu };
// The runtime's enum (xlaunch/mixed_precision.h): one for both.
using xlaunch::MixedPrecision;

// "NO" / "MULTI_CPU" / "MULTI_GPU", and "no" / "fp16" / "bf16": the spellings in the file.
const char* to_string(DistributedType t);
using xlaunch::to_string;

namespace detail {
// A row's default in the field's type: the table's readings, and the enums'.
using settings::parse_default;
inline void parse_default(const char* s, MixedPrecision& v) { v = parse_mixed_precision(s); }
inline void parse_default(const char*, DistributedType& v) { v = DistributedType::No; }  // "NO"
template <class T>
T default_of(const char* s) {
  T v{};
  parse_default(s, v);
  return v;
}
}  // namespace detail

// One field per row of the settings table, named as the key's last part.
#define XLAUNCH_CONFIG_FIELD(S, name, type, env, dflt, cli, check, runtime, meaning) \
  type name = detail::default_of<type>(dflt);

struct MpiSection {
  XLAUNCH_SETTINGS_MPI(XLAUNCH_CONFIG_FIELD, mpi.)
};

struct DdpSection {
  XLAUNCH_SETTINGS_DDP(XLAUNCH_CONFIG_FIELD, ddp.)
};

struct FsdpSection {
  XLAUNCH_SETTINGS_FSDP(XLAUNCH_CONFIG_FIELD, fsdp.)
};

struct OptimizerSection {
  XLAUNCH_SETTINGS_OPTIMIZER(XLAUNCH_CONFIG_FIELD, optimizer.)
};

struct LoaderSection {
  static constexpr int kAutoWorkers = -1;  // "auto" in the file: the runtime picks
  XLAUNCH_SETTINGS_LOADER(XLAUNCH_CONFIG_FIELD, loader.)
};

// Named checkpoints in project_dir (Accelerate's ProjectConfiguration: total_limit, and when the
// runtime saves one without being asked).
struct CheckpointSection {
  XLAUNCH_SETTINGS_CHECKPOINT(XLAUNCH_CONFIG_FIELD, checkpoint.)
};

struct LaunchConfig {
  XLAUNCH_TOP_LEVEL_SETTINGS(XLAUNCH_CONFIG_FIELD)
  // The file spells num_machines N, or MIN:MAX for an elastic job (torchrun's --nnodes MIN:MAX):
  // num_machines holds N or MAX, min_machines MIN (0: not elastic). An elastic job starts on up to
  // MAX of the listed machines that answer, and a restart continues on those still there, at least
  // MIN. num_processes counts the processes of MAX machines.
  int min_machines = 0;
  MpiSection mpi;
  DdpSection ddp;
  FsdpSection fsdp;
  OptimizerSection optimizer;
  LoaderSection loader;
  CheckpointSection checkpoint;
};

#undef XLAUNCH_CONFIG_FIELD

// The trackers log_with may name, in the order "all" expands to.
inline const std::vector<std::string> kLogWith = {"tensorboard", "jsonl", "csv"};

// Ranks started on each machine: num_processes / num_machines (MAX for an elastic job, whose world
// size is then the machines in the attempt times this).
inline int processes_per_machine(const LaunchConfig& c) { return c.num_processes / c.num_machines; }

// True for num_machines MIN:MAX with MIN < MAX: attempts may run on fewer machines than MAX.
inline bool is_elastic(const LaunchConfig& c) { return c.min_machines > 0 && c.min_machines < c.num_machines; }

// num_machines as the file spells it: "3", or "2:3" for an elastic job.
std::string machines_string(const LaunchConfig& c);

// Reads "N" or "MIN:MAX" (integers >= 1, MIN <= MAX) into *min_machines (0 for "N") and
// *num_machines. False, with nothing changed, for any other text.
bool parse_machines(const std::string& text, int* min_machines, int* num_machines);

// True when the ranks train on the CPU: MULTI_CPU, or use_cpu. (NO is one process, which takes a
// GPU when the machine has one.)
inline bool runs_on_cpu(const LaunchConfig& c) {
  return c.use_cpu || c.distributed_type == DistributedType::MultiCpu;
}

// "all" or "0,1,3", as XLAUNCH_GPU_IDS and the file spell it.
std::string gpu_ids_string(const std::vector<int>& ids);

}  // namespace xlaunch::config
