// The environment contract between the launcher and the runtime: every XLAUNCH_* variable, declared
// once, with its type, default and meaning. The launcher exports exactly those of kAll (with
// mpirun -x); the runtime reads its settings only from them, never from the YAML file. The few of
// kLauncherOnly tune `xlaunch` itself and stay in its own environment.
//
// The defaults declared here are the only spelling of each setting's default: the config schema
// (config/launch_config.h) and the runtime's option structs (AcceleratorOptions, LoaderOptions, the
// watchdog's settings) initialise their fields with default_int / default_float / default_bool /
// default_string of the variable, and tests/config/defaults_test.cpp fails if any of them differ.
//
// Header-only and free of torch and MPI, so the launcher can include it without linking either.
// A malformed value is the user's mistake: the readers throw xlaunch::UsageError naming it.
#pragma once

#include <cstdlib>
#include <string>

#include "xlaunch/error.h"

namespace xlaunch::env {

enum class Type { Bool, Int, Float, String };

struct Var {
  const char* name;
  Type type;
  const char* default_value;
  const char* meaning;
};

// clang-format off
inline constexpr Var kUseCpu                 {"XLAUNCH_USE_CPU", Type::Bool, "0", "1: train on the CPU even where GPUs exist"};
inline constexpr Var kGpuIds                 {"XLAUNCH_GPU_IDS", Type::String, "all", "GPUs this machine may use: 'all' or a comma list; local rank i takes the i-th"};
inline constexpr Var kMixedPrecision         {"XLAUNCH_MIXED_PRECISION", Type::String, "no", "no, fp16 or bf16"};
inline constexpr Var kGradAccumSteps         {"XLAUNCH_GRADIENT_ACCUMULATION_STEPS", Type::Int, "1", "micro-steps per optimizer step; gradients sync on the last"};
inline constexpr Var kBucketCapMb            {"XLAUNCH_BUCKET_CAP_MB", Type::Float, "25", "gradient bucket size in MiB (the first bucket is smaller)"};
inline constexpr Var kFindUnusedParameters   {"XLAUNCH_FIND_UNUSED_PARAMETERS", Type::Bool, "0", "1: reduce parameters without a gradient as zeros instead of failing"};
inline constexpr Var kCommHook               {"XLAUNCH_COMM_HOOK", Type::String, "none", "how gradient buckets travel: the name of a communication hook (the table in xlaunch/comm_hooks.h)"};
inline constexpr Var kPowerSgdRank           {"XLAUNCH_POWERSGD_RANK", Type::Int, "1", "rank of PowerSGD's approximation of each weight matrix"};
inline constexpr Var kPowerSgdStartStep      {"XLAUNCH_POWERSGD_START_STEP", Type::Int, "1000", "synced backward passes reduced exactly before PowerSGD starts"};
inline constexpr Var kZeroStage              {"XLAUNCH_ZERO_STAGE", Type::Int, "0", "sharded data parallelism (ZeRO): 0 none, 1 optimizer state sharded over the ranks, 2 optimizer state and gradients"};
inline constexpr Var kBroadcastBuffers       {"XLAUNCH_BROADCAST_BUFFERS", Type::Bool, "1", "1: broadcast rank 0's buffers (BatchNorm statistics) before each forward"};
inline constexpr Var kSyncBatchnorm          {"XLAUNCH_SYNC_BATCHNORM", Type::Bool, "0", "1: acc.prepare converts the model's BatchNorm1d/2d/3d to SyncBatchNorm (statistics over every rank's batch)"};
inline constexpr Var kNumWorkers             {"XLAUNCH_NUM_WORKERS", Type::String, "2", "loader worker threads per rank: a count, or 'auto'"};
inline constexpr Var kPinMemory              {"XLAUNCH_PIN_MEMORY", Type::Bool, "1", "1: collate into pinned host memory and copy to the GPU asynchronously"};
inline constexpr Var kEvenBatches            {"XLAUNCH_EVEN_BATCHES", Type::Bool, "1", "1: pad every rank's shard to the same number of batches; 0: read each sample once, and ranks whose data ends first join the others' gradient averaging"};
inline constexpr Var kPrefetchFactor         {"XLAUNCH_PREFETCH_FACTOR", Type::Int, "2", "batches in flight per loader worker"};
inline constexpr Var kNumCpuThreads          {"XLAUNCH_NUM_CPU_THREADS", Type::Int, "0", "intra-op threads per rank, handed to the program as OMP_NUM_THREADS; 0: the runtime's default (cores / local ranks)"};
inline constexpr Var kDebug                  {"XLAUNCH_DEBUG", Type::Bool, "0", "1: before each collective, every rank checks that the others issue the same one; on a GPU, each rank also counts its training loop's host-device syncs per step, for the report"};
inline constexpr Var kTimeoutS               {"XLAUNCH_TIMEOUT_S", Type::Int, "600", "seconds a collective may wait without progress before the job is declared stuck; 0: no watchdog"};
inline constexpr Var kReport                 {"XLAUNCH_REPORT", Type::Bool, "1", "1: record where each step's time goes, for the utilization report"};
inline constexpr Var kTraceDir               {"XLAUNCH_TRACE_DIR", Type::String, "", "directory for the timeline (each rank's part, merged by xlaunch run into trace.json); empty: none"};
inline constexpr Var kTraceSteps             {"XLAUNCH_TRACE_STEPS", Type::Int, "50", "optimizer steps the timeline covers, after the warm-up"};
inline constexpr Var kProfileOps             {"XLAUNCH_PROFILE_OPS", Type::Int, "0", "optimizer steps profiled operator by operator (LibTorch's Kineto profiler) after the warm-up, for the report's operator table; 0: none"};
inline constexpr Var kRecordShapes           {"XLAUNCH_RECORD_SHAPES", Type::Bool, "0", "1: the operator profile records input shapes (the table's rows per shape, and the timeline's spans)"};
inline constexpr Var kCudnnBenchmark         {"XLAUNCH_CUDNN_BENCHMARK", Type::Bool, "0", "1: cuDNN tries its algorithms for each new input shape and keeps the fastest (torch.backends.cudnn.benchmark)"};
inline constexpr Var kDeterministic          {"XLAUNCH_DETERMINISTIC", Type::Bool, "0", "1: deterministic algorithms only (torch.use_deterministic_algorithms, cudnn.deterministic, no cuDNN autotuning); operations without one fail, naming themselves"};
inline constexpr Var kLogWith                {"XLAUNCH_LOG_WITH", Type::String, "", "trackers acc.log writes to (docs/tracking.md): a comma list of tensorboard, jsonl, csv; empty: none"};
inline constexpr Var kReportInterval         {"XLAUNCH_REPORT_INTERVAL", Type::Int, "50", "with a tracker on: every this many optimizer steps, the ranks' utilization (xlaunch/steps_per_s, xlaunch/data_wait...) goes to the tracker"};
inline constexpr Var kLogHistogramsEvery     {"XLAUNCH_LOG_HISTOGRAMS_EVERY_N_STEPS", Type::Int, "0", "with TensorBoard on: histograms of every prepared model's weights and gradients every n-th optimizer step; 0: none"};
inline constexpr Var kProjectDir             {"XLAUNCH_PROJECT_DIR", Type::String, "", "the project directory: save_state() without a path writes <project_dir>/checkpoints/checkpoint_<step>; empty: save_state needs a path"};
inline constexpr Var kCheckpointTotalLimit   {"XLAUNCH_CHECKPOINT_TOTAL_LIMIT", Type::Int, "0", "automatically named checkpoints kept in project_dir (the newest; older ones removed after each complete save); 0: all"};
inline constexpr Var kCheckpointEveryNSteps  {"XLAUNCH_CHECKPOINT_EVERY_N_STEPS", Type::Int, "0", "save a named checkpoint after every n-th optimizer step; 0: never"};
inline constexpr Var kCheckpointEveryEpoch   {"XLAUNCH_CHECKPOINT_EVERY_EPOCH", Type::Bool, "0", "1: save a named checkpoint when the first prepared loader finishes an epoch"};
inline constexpr Var kResume                 {"XLAUNCH_RESUME", Type::String, "", "what acc.maybe_load_state() loads: 'latest' (the newest complete checkpoint in project_dir) or a checkpoint directory; empty: start afresh"};
inline constexpr Var kLogDir                 {"XLAUNCH_LOG_DIR", Type::String, "", "directory for per-rank logs; empty: none"};
inline constexpr Var kRunId                  {"XLAUNCH_RUN_ID", Type::String, "", "identifier of this launch, the same on every rank"};
inline constexpr Var kRestartCount           {"XLAUNCH_RESTART_COUNT", Type::Int, "0", "how many times the launcher has restarted this job"};
inline constexpr Var kStatusDir              {"XLAUNCH_STATUS_DIR", Type::String, "", "this attempt's directory for the ranks' exit statuses and progress boards (made by xlaunch run)"};
inline constexpr Var kConfigFile             {"XLAUNCH_CONFIG_FILE", Type::String, "", "the config file: read by `xlaunch` when no --config_file is given; exported to the ranks as the file used"};
// clang-format on

// Every variable the launcher exports, in the order it exports them.
inline constexpr const Var* kAll[] = {
    &kUseCpu,          &kGpuIds,       &kMixedPrecision, &kGradAccumSteps,
    &kBucketCapMb,     &kFindUnusedParameters,       &kCommHook,   &kPowerSgdRank,   &kPowerSgdStartStep, &kZeroStage,
    &kBroadcastBuffers, &kSyncBatchnorm, &kNumWorkers,
    &kPinMemory,       &kEvenBatches,  &kPrefetchFactor, &kNumCpuThreads, &kDebug,    &kTimeoutS,
    &kReport,          &kTraceDir,     &kTraceSteps, &kProfileOps, &kRecordShapes, &kCudnnBenchmark, &kDeterministic, &kLogWith,  &kReportInterval, &kLogHistogramsEvery, &kProjectDir,
    &kCheckpointTotalLimit, &kCheckpointEveryNSteps, &kCheckpointEveryEpoch, &kResume, &kLogDir,
    &kRunId,           &kRestartCount, &kStatusDir,    &kConfigFile,
};

// Read by the launcher from its own environment, never exported to the ranks (so not in kAll).
// clang-format off
inline constexpr Var kNvmlLibrary            {"XLAUNCH_NVML_LIBRARY", Type::String, "libnvidia-ml.so.1", "the NVML library `xlaunch run` samples the GPUs with (the report, --monitor), and a GPU rank reads its SM use with (xlaunch/gpu_sm, inherited, not exported); empty: the default"};
inline constexpr Var kCpuinfoFile            {"XLAUNCH_CPUINFO_FILE", Type::String, "", "a copy of /proc/cpuinfo that `xlaunch config` and `xlaunch run` read this machine's CPU flags from (whether bf16/fp16 mixed precision pays on a CPU job); empty: /proc/cpuinfo"};
// clang-format on
inline constexpr const Var* kLauncherOnly[] = {&kNvmlLibrary, &kCpuinfoFile};

// The raw value: the environment's, or the declared default when unset.
inline std::string raw(const Var& v) {
  const char* s = std::getenv(v.name);
  return s ? std::string(s) : std::string(v.default_value);
}

inline UsageError bad_value(const Var& v, const std::string& value, const char* expected) {
  return UsageError(std::string(v.name) + "='" + value + "' is not " + expected + " (" +
                               v.meaning + "); unset it or fix the launcher config");
}

// Parsing a value as the variable's type; `value` is the environment's or the declared default.
inline bool parse_bool(const Var& v, const std::string& s) {
  if (s == "1" || s == "true" || s == "True" || s == "yes") return true;
  if (s == "0" || s == "false" || s == "False" || s == "no" || s.empty()) return false;
  throw bad_value(v, s, "a boolean (0 or 1)");
}

inline long parse_int(const Var& v, const std::string& s) {
  char* end = nullptr;
  const long x = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0') throw bad_value(v, s, "an integer");
  return x;
}

inline double parse_float(const Var& v, const std::string& s) {
  char* end = nullptr;
  const double x = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0') throw bad_value(v, s, "a number");
  return x;
}

// The value this process was given (the declared default when unset).
inline std::string get_string(const Var& v) { return raw(v); }
inline bool get_bool(const Var& v) { return parse_bool(v, raw(v)); }
inline long get_int(const Var& v) { return parse_int(v, raw(v)); }
inline double get_float(const Var& v) { return parse_float(v, raw(v)); }

// The declared default, typed: what every struct that holds the setting starts from.
inline std::string default_string(const Var& v) { return v.default_value; }
inline bool default_bool(const Var& v) { return parse_bool(v, v.default_value); }
inline long default_int(const Var& v) { return parse_int(v, v.default_value); }
inline double default_float(const Var& v) { return parse_float(v, v.default_value); }

}  // namespace xlaunch::env
