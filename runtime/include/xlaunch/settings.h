// Every setting of a launched job, one row each: its key in the config file, its command-line
// option, the XLAUNCH_* variable that carries it to the ranks, its type, default, allowed values
// and meaning. Everything else is generated from the rows:
//   - the LaunchConfig fields and the schema's reading, writing and range checks (config/),
//   - `xlaunch run`'s options that set them (launcher/src/cli/overrides.cpp),
//   - the launch plan's exports (launcher/src/launch/launch_plan.cpp),
//   - the variables' declarations (env_vars.h) and AcceleratorOptions' fields and from_env(),
//   - LoaderOptions::from_env()'s reads, `xlaunch env`'s listing, and the key table of
//     docs/config-reference.md (`xlaunch env --settings_table` prints it;
//     tests/config/settings_doc_test.cpp compares).
// tests/config/settings_row_test.cpp compiles in a test-only row and finds it in each of these.
//
// Precedence, one rule wherever a value is decided: command line > the XLAUNCH_* variable in the
// environment `xlaunch run` starts in > config file > the default here. `xlaunch run` names the
// keys each of the first two set; a program started by hand reads only the variables. The
// per-launch variables (env_vars.h: XLAUNCH_RUN_ID...) are `xlaunch run`'s; one set in its
// environment is named in a warning.
//
// Adding a setting: one row below (a hook's own settings: a row in its section of comm_hooks.h).
// Its LaunchConfig field, option, variable and AcceleratorOptions field follow; only what the
// setting does has to be written where it is used.
//
// A row: X(S, name, type, env, default, cli, check, runtime, meaning), for a macro X given to
// XLAUNCH_SETTINGS(X) (or to one section's macro with its prefix).
//   S        the section prefix the row is expanded with ("ddp." for ddp.bucket_cap_mb; empty at the
//            top level): the key is #S #name, the field LaunchConfig::S name.
//   name     the key's last part and the LaunchConfig field's name.
//   type     the LaunchConfig field's C++ type.
//   env      ENV(kConstant, "XLAUNCH_NAME", Bool|Int|Float|String): the variable (env::kConstant);
//            NO_ENV: the launcher's own setting, never sent to the ranks.
//   default  as the file and the variable spell it.
//   cli      CLI("--name", "help"): `xlaunch run`'s option (a bool is a flag that sets true);
//            NO_CLI: the file only.
//   check    RANGE(condition on v, "allowed", "hint"): checked by validate(), for the file and the
//            command line alike; ANY: every value of the type; ONE_OF(names, "hint"): one of a list
//            (the choice lists below); BY_HAND("allowed"): read, written and checked by
//            config/src/schema.cpp and validate() themselves (spellings such as "auto" or MIN:MAX).
//   runtime  ACC(type, field): AcceleratorOptions::field, declared and read by from_env() from the
//            row; ACC_AT(path): an AcceleratorOptions member that another header declares
//            (ddp.bucket_cap_mb: ReducerOptions); LOADER(field): LoaderOptions::field, read by its
//            from_env(); READ_BY(what): read by another part of the runtime (the watchdog, the
//            profiler), or by hand; LAUNCHER: not read by the ranks.
//   meaning  one line; also the variable's meaning in messages about a malformed value.
//
// Header-only, free of torch and MPI: config/, the launcher and the runtime all include it.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "xlaunch/comm_hooks.h"
#include "xlaunch/wrap_policy.h"
#include "xlaunch/zero_stages.h"

namespace xlaunch::settings {

// The config_version this build writes. Files with a higher version are refused; lower ones are
// upgraded on load.
inline constexpr int kConfigVersion = 1;

// The choice lists of ONE_OF rows, as the file spells them.
inline constexpr const char* kComputeEnvironments[] = {"LOCAL_MACHINE"};
inline constexpr const char* kBindTo[] = {"none", "hwthread", "core", "l2cache", "l3cache", "socket", "numa", "board"};
inline constexpr const char* kMixedPrecisions[] = {"no", "fp16", "bf16"};
// Stage 3's mixed-precision policy: the dtype units are gathered and computed in.
inline constexpr const char* kParamDtypes[] = {"fp32", "bf16", "fp16"};
inline constexpr const char* kShardGroups[] = {"world", "machine"};
// The signal a scheduler sends `xlaunch run` before it ends the job (Slurm's --signal, Kubernetes'
// SIGTERM before SIGKILL).
inline constexpr const char* kPreemptSignals[] = {"SIGTERM", "SIGUSR1"};
// optimizer.fused: the fused step where it can (auto), always or failing (true), never (false).
inline constexpr const char* kOptimizerFused[] = {"auto", "true", "false"};

// A row's default, as the file and the variable spell it, in the type of a field that holds it. A
// list's default is empty (gpu_ids' "all", log_with's none).
inline void parse_default(const char* s, int& v) { v = std::atoi(s); }
inline void parse_default(const char* s, int64_t& v) { v = std::atoll(s); }
inline void parse_default(const char* s, bool& v) { v = s[0] == '1'; }
inline void parse_default(const char* s, double& v) { v = std::strtod(s, nullptr); }
inline void parse_default(const char* s, std::string& v) { v = s; }
inline void parse_default(const char*, std::vector<std::string>& v) { v = {}; }
inline void parse_default(const char*, std::vector<int>& v) { v = {}; }

template <class T>
T default_of(const char* s) {
  T v{};
  parse_default(s, v);
  return v;
}

}  // namespace xlaunch::settings

// clang-format off
#define XLAUNCH_SETTINGS_JOB(X, S)                                                                                    \
  X(S, config_version, int, NO_ENV, "1", NO_CLI,                                                                     \
    RANGE(v >= 1 && v <= settings::kConfigVersion, "1 to " + std::to_string(settings::kConfigVersion),              \
          "a newer xlaunch wrote this file; upgrade xlaunch"),                                                       \
    LAUNCHER, "schema version of the file; files from a newer xlaunch are refused")                                  \
  X(S, compute_environment, std::string, NO_ENV, "LOCAL_MACHINE", NO_CLI,                                            \
    ONE_OF(settings::kComputeEnvironments, "xlaunch runs on machines you start it on; cloud environments such as "   \
                                           "AMAZON_SAGEMAKER are Accelerate-only"),                                  \
    LAUNCHER, "where the job runs: only machines you start xlaunch on")                                              \
  X(S, distributed_type, DistributedType, NO_ENV, "NO", NO_CLI, BY_HAND("NO, MULTI_CPU or MULTI_GPU"),               \
    LAUNCHER, "NO: one process; MULTI_CPU: several CPU processes; MULTI_GPU: one process per GPU")                    \
  X(S, num_processes, int, NO_ENV, "1", CLI("-n,--num_processes", "Processes in total, over all machines"),          \
    RANGE(v >= 1, "an integer >= 1", ""), LAUNCHER, "processes in total, over all machines")                          \
  X(S, num_machines, int, NO_ENV, "1",                                                                               \
    CLI("--num_machines", "Machines the job runs on: N, or MIN:MAX to continue on at least MIN when machines are "   \
                          "lost (with --max_restarts)"),                                                             \
    BY_HAND("an integer >= 1, or MIN:MAX"), LAUNCHER, "machines the job runs on: N, or MIN:MAX for an elastic job")   \
  X(S, machine_rank, int, NO_ENV, "0", CLI("--machine_rank", "Rank of this machine, 0 to num_machines - 1"),          \
    ANY, LAUNCHER, "rank of this machine, 0 to num_machines - 1")                 \
  X(S, main_process_ip, std::string, NO_ENV, "", CLI("--main_process_ip", "Address of the machine of rank 0"), ANY,  \
    LAUNCHER, "address of the machine of rank 0; empty: this machine")                                              \
  X(S, main_process_port, int, NO_ENV, "0",                                                                          \
    CLI("--main_process_port", "Port on the main machine; 0 picks a free one"),                                      \
    RANGE(v >= 0 && v <= 65535, "1 to 65535, or 0 to pick a free port", ""), LAUNCHER,                              \
    "port of the main process; 0: the launcher picks a free port")                                                   \
  X(S, gpu_ids, std::vector<int>, ENV(kGpuIds, "XLAUNCH_GPU_IDS", String), "all",                                    \
    CLI("--gpu_ids", "GPUs of this machine: 'all', or ids such as 0,1"),                                             \
    BY_HAND("'all', or GPU ids as a list or comma list"), ACC(std::string, gpu_ids),                                 \
    "GPUs this machine may use: 'all' or a comma list; local rank i takes the i-th")                                 \
  X(S, mixed_precision, MixedPrecision, ENV(kMixedPrecision, "XLAUNCH_MIXED_PRECISION", String), "no",               \
    CLI("--mixed_precision", "no, fp16 or bf16"), ONE_OF(settings::kMixedPrecisions, "fp8 is Accelerate-only"),     \
    ACC(std::string, mixed_precision), "no, fp16 or bf16")                                                           \
  X(S, gradient_accumulation_steps, int, ENV(kGradAccumSteps, "XLAUNCH_GRADIENT_ACCUMULATION_STEPS", Int), "1",      \
    CLI("--gradient_accumulation_steps", "Micro-steps per optimizer step"), RANGE(v >= 1, "an integer >= 1", ""),   \
    ACC(int, gradient_accumulation_steps), "micro-steps per optimizer step; gradients sync on the last")             \
  X(S, use_cpu, bool, ENV(kUseCpu, "XLAUNCH_USE_CPU", Bool), "0",                                                    \
    CLI("--cpu,--use_cpu", "Train on CPUs even where GPUs exist"), ANY, ACC(bool, cpu),                               \
    "1: train on the CPU even where GPUs exist")                                                                     \
  X(S, debug, bool, ENV(kDebug, "XLAUNCH_DEBUG", Bool), "0",                                                         \
    CLI("--debug", "Extra consistency checks and verbose runtime logging"), ANY, READ_BY(the watchdog),              \
    "1: before each collective, every rank checks that the others issue the same one; on a GPU, each rank also "     \
    "counts its training loop's host-device syncs per step, for the report")                                         \
  X(S, sync_batchnorm, bool, ENV(kSyncBatchnorm, "XLAUNCH_SYNC_BATCHNORM", Bool), "0", NO_CLI, ANY,                  \
    ACC(bool, sync_batchnorm),                                                                                       \
    "1: acc.prepare converts the model's BatchNorm1d/2d/3d to SyncBatchNorm (statistics over every rank's batch)")   \
  X(S, num_cpu_threads_per_process, int, ENV(kNumCpuThreads, "XLAUNCH_NUM_CPU_THREADS", Int), "0",                   \
    CLI("--num_cpu_threads_per_process", "Intra-op threads of each rank (OMP_NUM_THREADS); 0: cores / ranks of the " \
                                         "machine"),                                                                 \
    RANGE(v >= 0, "an integer >= 1, or 0 to let the runtime decide", ""), READ_BY(the rank wrapper),                 \
    "intra-op threads per rank, handed to the program as OMP_NUM_THREADS; 0: the runtime's default (cores / local "  \
    "ranks)")

#define XLAUNCH_SETTINGS_MPI(X, S)                                                                                    \
  X(S, hostfile, std::string, NO_ENV, "", CLI("--hostfile,--mpirun_hostfile", "Open MPI hostfile listing the machines"),\
    ANY, LAUNCHER, "Open MPI hostfile; empty: none")                                                                 \
  X(S, hosts, std::vector<std::string>, NO_ENV, "", NO_CLI, BY_HAND("a list of host names"), LAUNCHER,               \
    "several machines without a hostfile: mpirun -H")                                                                \
  X(S, bind_to, std::string, NO_ENV, "none", NO_CLI, ONE_OF(settings::kBindTo, ""), LAUNCHER,                        \
    "mpirun --bind-to; ranks run several threads each")                                                              \
  X(S, map_by, std::string, NO_ENV, "", NO_CLI, BY_HAND("empty, or an Open MPI --map-by value"), LAUNCHER,           \
    "mpirun --map-by; empty: slot (one machine), ppr:N:node (several)")                                              \
  X(S, extra_args, std::vector<std::string>, NO_ENV, "", NO_CLI, BY_HAND("a list of strings"), LAUNCHER,             \
    "appended to mpirun's options as given")

#define XLAUNCH_SETTINGS_DDP(X, S)                                                                                    \
  X(S, bucket_cap_mb, double, ENV(kBucketCapMb, "XLAUNCH_BUCKET_CAP_MB", Float), "25", NO_CLI,                       \
    RANGE(v > 0, "a number > 0", ""), ACC_AT(ddp.bucket_cap_mb),                                                     \
    "gradient bucket size in MiB (the first bucket is smaller)")                                                     \
  X(S, find_unused_parameters, bool, ENV(kFindUnusedParameters, "XLAUNCH_FIND_UNUSED_PARAMETERS", Bool), "0", NO_CLI,\
    ANY, ACC_AT(ddp.find_unused_parameters), "1: reduce parameters without a gradient as zeros instead of failing")  \
  X(S, broadcast_buffers, bool, ENV(kBroadcastBuffers, "XLAUNCH_BROADCAST_BUFFERS", Bool), "1", NO_CLI, ANY,         \
    ACC(bool, broadcast_buffers), "1: broadcast rank 0's buffers (BatchNorm statistics) before each forward")        \
  X(S, comm_hook, std::string, ENV(kCommHook, "XLAUNCH_COMM_HOOK", String), "none", NO_CLI,                          \
    ONE_OF(comm_hook_names(), ""), ACC_AT(ddp.comm_hook),                                                            \
    "how gradient buckets travel: the name of a communication hook (the table in xlaunch/comm_hooks.h)")             \
  XLAUNCH_COMM_HOOK_SETTINGS(X, S)                                                                                   \
  X(S, zero_stage, int, ENV(kZeroStage, "XLAUNCH_ZERO_STAGE", Int), "0", NO_CLI,                                     \
    RANGE(xlaunch::is_zero_stage(v), xlaunch::zero_stage_choices(),                                                  \
          xlaunch::zero_stage_choices(/*with_meanings=*/true) + " (docs/memory.md)"),                                \
    ACC_AT(ddp.zero_stage),                                                                                          \
    "sharded data parallelism (ZeRO): 0 none, 1 optimizer state sharded over the ranks, 2 optimizer state and "      \
    "gradients, 3 parameters too (fully sharded, the fsdp section)")                                                  \
  X(S, shard_group, std::string, ENV(kShardGroup, "XLAUNCH_SHARD_GROUP", String), "world", NO_CLI,                   \
    ONE_OF(settings::kShardGroups, "machine needs zero_stage 1-3 and a job over several machines (docs/memory.md)"),  \
    ACC_AT(ddp.shard_group),                                                                                         \
    "the ranks ZeRO shards over: world (every rank), or machine (each machine's ranks, the machines replicas of "    \
    "each other: FSDP's HYBRID_SHARD at stage 3, _HYBRID_SHARD_ZERO2 at stage 2)")

// Stage 3's units (ddp.zero_stage 3, docs/memory.md); read by the reducer with the ddp rows.
#define XLAUNCH_SETTINGS_FSDP(X, S)                                                                                   \
  X(S, prefetch, int, ENV(kFsdpPrefetch, "XLAUNCH_FSDP_PREFETCH", Int), "1", NO_CLI,                                 \
    RANGE(v >= 0 && v <= 64, "an integer from 0 to 64", "1 hides each unit's gather behind the one before"),         \
    ACC_AT(ddp.fsdp_prefetch), "units whose gather is issued ahead of the one computing, forward and backward")      \
  X(S, reshard_after_forward, bool, ENV(kFsdpReshardAfterForward, "XLAUNCH_FSDP_RESHARD_AFTER_FORWARD", Bool), "1",  \
    NO_CLI, ANY, ACC_AT(ddp.reshard_after_forward),                                                                  \
    "1: free a unit's gathered parameters after its forward and gather them again for its backward; 0: keep them "   \
    "until its backward (less communication, stage-2 memory)")                                                        \
  X(S, activation_checkpointing, bool,                                                                               \
    ENV(kFsdpActivationCheckpointing, "XLAUNCH_FSDP_ACTIVATION_CHECKPOINTING", Bool), "0", NO_CLI, ANY,              \
    ACC_AT(ddp.fsdp_activation_checkpointing),                                                                       \
    "1: keep only each unit's inputs in forward and run the unit again in its backward (one unit's activations "     \
    "at a time, for one more forward)")                                                                              \
  X(S, param_dtype, std::string, ENV(kFsdpParamDtype, "XLAUNCH_FSDP_PARAM_DTYPE", String), "fp32", NO_CLI,          \
    ONE_OF(settings::kParamDtypes, "bf16 or fp16 with mixed_precision of the same"), ACC_AT(ddp.fsdp_param_dtype),    \
    "the dtype each unit is gathered and computed in; its shards, gradients' reduction and optimizer stay fp32 "      \
    "(FSDP2's param_dtype; needs mixed_precision of the same)")                                                      \
  X(S, wrap, std::string, ENV(kFsdpWrap, "XLAUNCH_FSDP_WRAP", String), "auto", NO_CLI,                               \
    RANGE(xlaunch::WrapPolicy::valid(v), xlaunch::kWrapPolicySpellings, "xlaunch/wrap_policy.h, docs/memory.md"),     \
    ACC_AT(ddp.fsdp_wrap),                                                                                           \
    "which Sequential entries and FullyShard modules are units: auto (all), none, type:Block, name:blocks.*, or "    \
    "size:N (at least N trainable parameters)")

// The prepared optimizers' step (docs/performance.md#compiling-the-step).
#define XLAUNCH_SETTINGS_OPTIMIZER(X, S)                                                                              \
  X(S, fused, std::string, ENV(kOptimizerFused, "XLAUNCH_OPTIMIZER_FUSED", String), "auto",                          \
    CLI("--optimizer_fused", "auto, true or false: step SGD/Adam/AdamW/Lion in one pass over memory (the CPU)"),     \
    ONE_OF(settings::kOptimizerFused, "auto falls back to the optimizer's own step where the fused one cannot run"),  \
    ACC(std::string, optimizer_fused),                                                                               \
    "auto: LibTorch's SGD, Adam, AdamW and xlaunch's Lion step in one fused pass over memory where their parameters " \
    "allow (on the CPU: float32, or bfloat16/float16 with float32 master weights), their own step elsewhere; true: " \
    "the fused step or an error naming why not; false: "                                                             \
    "their own step")

#define XLAUNCH_SETTINGS_LOADER(X, S)                                                                                 \
  X(S, num_workers, int, ENV(kNumWorkers, "XLAUNCH_NUM_WORKERS", String), "2", NO_CLI,                               \
    BY_HAND("'auto' or an integer from 0 to 1024"), READ_BY(LoaderOptions::from_env),                                \
    "loader worker threads per rank: a count, or 'auto'")                                                            \
  X(S, pin_memory, bool, ENV(kPinMemory, "XLAUNCH_PIN_MEMORY", Bool), "1", NO_CLI, ANY,                              \
    LOADER(pin_memory), "1: collate into pinned host memory and copy to the GPU asynchronously")       \
  X(S, even_batches, bool, ENV(kEvenBatches, "XLAUNCH_EVEN_BATCHES", Bool), "1", NO_CLI, ANY, LOADER(even_batches),  \
    "1: pad every rank's shard to the same number of batches; 0: read each sample once, and ranks whose data ends "  \
    "first join the others' gradient averaging")                                                                     \
  X(S, prefetch_factor, int, ENV(kPrefetchFactor, "XLAUNCH_PREFETCH_FACTOR", Int), "2", NO_CLI,                      \
    RANGE(v >= 1, "an integer >= 1", ""), LOADER(prefetch_factor), "batches in flight per loader worker")

#define XLAUNCH_SETTINGS_OBSERVE(X, S)                                                                                \
  X(S, log_dir, std::string, ENV(kLogDir, "XLAUNCH_LOG_DIR", String), "", CLI("--log_dir", "Directory for per-rank logs"),\
    ANY, READ_BY(the rank wrapper), "directory for per-rank logs; empty: none")                                       \
  X(S, max_restarts, int, NO_ENV, "0", CLI("--max_restarts", "Restart a failed job up to this many times"),          \
    RANGE(v >= 0, "an integer >= 0", ""), LAUNCHER, "times `xlaunch run` restarts a failed job")                    \
  X(S, max_machine_failures, int, NO_ENV, "2",                                                                       \
    CLI("--max_machine_failures", "Elastic jobs: keep out a machine at fault in this many failed attempts"),        \
    RANGE(v >= 1, "an integer >= 1",                                                                                 \
          "the failed attempts a machine may be at fault in before an elastic job keeps it out"),                    \
    LAUNCHER, "elastic jobs: failed attempts a machine may be at fault in before it is kept out")                    \
  X(S, timeout_s, int, ENV(kTimeoutS, "XLAUNCH_TIMEOUT_S", Int), "600", NO_CLI,                                      \
    RANGE(v >= 0, "an integer >= 0 (seconds; 0 turns the watchdog off)",                                             \
          "a few minutes is usual: the longest a healthy collective may go without progress"),                       \
    READ_BY(the watchdog),                                                                                           \
    "seconds a collective may wait without progress before the job is declared stuck; 0: no watchdog")              \
  X(S, report, bool, ENV(kReport, "XLAUNCH_REPORT", Bool), "1", NO_CLI, ANY, READ_BY(the step clock),                \
    "1: record where each step's time goes, for the utilization report")                                             \
  X(S, trace_dir, std::string, ENV(kTraceDir, "XLAUNCH_TRACE_DIR", String), "",                                      \
    CLI("--trace", "Write a timeline of every rank (DIR/trace.json) and DIR/report.html"), ANY,                      \
    READ_BY(the profiler),                                                                                           \
    "directory for the timeline (each rank's part, merged by xlaunch run into trace.json); empty: none")             \
  X(S, trace_steps, int, ENV(kTraceSteps, "XLAUNCH_TRACE_STEPS", Int), "50", NO_CLI,                                 \
    RANGE(v >= 1 && v <= 100000, "an integer from 1 to 100000", ""), READ_BY(the profiler),                          \
    "optimizer steps the timeline covers, after the warm-up")                                                        \
  X(S, profile_ops, int, ENV(kProfileOps, "XLAUNCH_PROFILE_OPS", Int), "0",                                          \
    CLI("--profile_ops", "Profile N optimizer steps after the warm-up operator by operator: the report's operator "  \
                         "table"),                                                                                   \
    RANGE(v >= 0 && v <= 1000, "an integer from 0 to 1000 (optimizer steps profiled after the warm-up; 0: none)",    \
          "the profiler keeps every event of every profiled step in memory until the last: a few steps (5-20) make " \
          "the table"),                                                                                              \
    ACC(int64_t, profile_ops),                                                                                       \
    "optimizer steps profiled operator by operator (LibTorch's Kineto profiler) after the warm-up, for the report's "\
    "operator table; 0: none")                                                                                       \
  X(S, record_shapes, bool, ENV(kRecordShapes, "XLAUNCH_RECORD_SHAPES", Bool), "0",                                  \
    CLI("--record_shapes", "The operator profile records input shapes"), ANY, ACC(bool, record_shapes),             \
    "1: the operator profile records input shapes (the table's rows per shape, and the timeline's spans)")           \
  X(S, cudnn_benchmark, bool, ENV(kCudnnBenchmark, "XLAUNCH_CUDNN_BENCHMARK", Bool), "0",                            \
    CLI("--cudnn_benchmark", "cuDNN autotunes its algorithms for each new input shape"), ANY,                        \
    ACC(bool, cudnn_benchmark),                                                                                      \
    "1: cuDNN tries its algorithms for each new input shape and keeps the fastest (torch.backends.cudnn.benchmark)") \
  X(S, deterministic, bool, ENV(kDeterministic, "XLAUNCH_DETERMINISTIC", Bool), "0",                                 \
    CLI("--deterministic", "Deterministic algorithms only (cuDNN's too); operations without one fail, naming "       \
                           "themselves"),                                                                            \
    ANY, ACC(bool, deterministic),                                                                                   \
    "1: deterministic algorithms only (torch.use_deterministic_algorithms, cudnn.deterministic, no cuDNN "           \
    "autotuning); operations without one fail, naming themselves")                                                   \
  X(S, log_with, std::vector<std::string>, ENV(kLogWith, "XLAUNCH_LOG_WITH", String), "",                            \
    CLI("--log_with", "Trackers acc.log writes to, in project_dir: tensorboard, jsonl, csv, all, or a comma list"),  \
    BY_HAND("tensorboard, jsonl, csv or all, or a list of them"), ACC(std::vector<std::string>, log_with),          \
    "trackers acc.log writes to (docs/tracking.md): a comma list of tensorboard, jsonl, csv; empty: none")           \
  X(S, report_interval, int, ENV(kReportInterval, "XLAUNCH_REPORT_INTERVAL", Int), "50",                             \
    CLI("--report_interval", "With a tracker on: log the ranks' utilization every N optimizer steps"),               \
    RANGE(v >= 1 && v <= 1000000, "an integer from 1 to 1000000", ""), ACC(int64_t, report_interval),               \
    "with a tracker on: every this many optimizer steps, the ranks' utilization (xlaunch/steps_per_s, "              \
    "xlaunch/data_wait...) goes to the tracker")                                                                     \
  X(S, log_histograms_every_n_steps, int, ENV(kLogHistogramsEvery, "XLAUNCH_LOG_HISTOGRAMS_EVERY_N_STEPS", Int), "0",\
    NO_CLI, RANGE(v >= 0, "0 (none) or a number of optimizer steps", ""),                                            \
    ACC(int64_t, log_histograms_every_n_steps),                                                                      \
    "with TensorBoard on: histograms of every prepared model's weights and gradients every n-th optimizer step; 0: " \
    "none")                                                                                                          \
  X(S, project_dir, std::string, ENV(kProjectDir, "XLAUNCH_PROJECT_DIR", String), "",                                \
    CLI("--project_dir", "Project directory: named checkpoints go to DIR/checkpoints, --resume continues from them"),\
    ANY, ACC(std::string, project_dir),                                                                              \
    "the project directory: save_state() without a path writes <project_dir>/checkpoints/checkpoint_<step>; empty: " \
    "save_state needs a path")

#define XLAUNCH_SETTINGS_CHECKPOINT(X, S)                                                                             \
  X(S, total_limit, int, ENV(kCheckpointTotalLimit, "XLAUNCH_CHECKPOINT_TOTAL_LIMIT", Int), "0",                     \
    CLI("--checkpoint_total_limit", "Named checkpoints kept in project_dir (the newest); 0: all"),                   \
    RANGE(v >= 0, "an integer >= 0 (0 keeps every checkpoint)", ""), ACC(int64_t, checkpoint_total_limit),           \
    "automatically named checkpoints kept in project_dir (the newest; older ones removed after each complete "       \
    "save); 0: all")                                                                                                 \
  X(S, every_n_steps, int, ENV(kCheckpointEveryNSteps, "XLAUNCH_CHECKPOINT_EVERY_N_STEPS", Int), "0",                \
    CLI("--checkpoint_every_n_steps", "Save a named checkpoint every N optimizer steps; 0: never"),                  \
    RANGE(v >= 0, "an integer >= 0 (0: only when the program saves)", ""), ACC(int64_t, checkpoint_every_n_steps),   \
    "save a named checkpoint after every n-th optimizer step; 0: never")                                             \
  X(S, every_epoch, bool, ENV(kCheckpointEveryEpoch, "XLAUNCH_CHECKPOINT_EVERY_EPOCH", Bool), "0",                   \
    CLI("--checkpoint_every_epoch", "Save a named checkpoint after every epoch"), ANY,                               \
    ACC(bool, checkpoint_every_epoch),                                                                               \
    "1: save a named checkpoint when the first prepared loader finishes an epoch")                                   \
  X(S, async, bool, ENV(kCheckpointAsync, "XLAUNCH_CHECKPOINT_ASYNC", Bool), "0",                                    \
    CLI("--checkpoint_async", "Write checkpoints in the background while training goes on"), ANY,                    \
    ACC(bool, checkpoint_async),                                                                                     \
    "1: save_state copies each rank's state to host memory and returns; a thread on every rank writes it, and the "  \
    "next save, a load, a preemption and the end of the job wait for it (every rank must see the directory)")

#define XLAUNCH_SETTINGS_PREEMPT(X, S)                                                                                \
  X(S, preempt_signal, std::string, NO_ENV, "SIGTERM",                                                               \
    CLI("--preempt_signal", "The signal that means the job is being preempted: SIGTERM (default) or SIGUSR1"),       \
    ONE_OF(settings::kPreemptSignals,                                                                                \
           "the signal your scheduler sends before it ends a job (Slurm: --signal=B:USR1@180)"),                     \
    LAUNCHER, "the signal that means the job is being preempted (xlaunch/preemption.h)")                             \
  X(S, preempt_timeout_s, int, NO_ENV, "120",                                                                        \
    CLI("--preempt_timeout_s", "Seconds the ranks have to checkpoint and stop after a preemption before the job is " \
                               "ended"),                                                                             \
    RANGE(v >= 1, "an integer >= 1 (seconds)",                                                                       \
          "the ranks need this long to reach their next optimizer step and save a checkpoint"),                      \
    LAUNCHER, "seconds `xlaunch run` gives the ranks, after passing on a preemption, before it ends the job")        \
  X(S, startup_timeout_s, int, NO_ENV, "120",                                                                        \
    CLI("--startup_timeout_s", "Seconds every rank has, from mpirun's start, to show a first sign of life; 0: no "   \
                               "deadline"),                                                                          \
    RANGE(v >= 0, "an integer >= 0 (seconds; 0: no start-up deadline)",                                              \
          "a machine whose Open MPI daemon never calls back leaves mpirun waiting for ever; 120 s covers slow ssh"), \
    LAUNCHER, "seconds from mpirun's start until every rank has shown a first sign of life (at most timeout_s x 6 "  \
              "when timeout_s is set); past it the job is ended, naming the machines whose ranks never started; 0: " \
              "no deadline")                                                                                         \
  XLAUNCH_SETTINGS_TEST_ONLY(X, S)

// A row only tests/config/settings_row_test.cpp compiles in (with XLAUNCH_SETTINGS_TEST_ROW): it
// shows that a row alone makes a setting of the file, the command line, the launch and from_env().
#ifdef XLAUNCH_SETTINGS_TEST_ROW
#define XLAUNCH_SETTINGS_TEST_ONLY(X, S)                                                                              \
  X(S, test_only_setting, int, ENV(kTestOnlySetting, "XLAUNCH_TEST_ONLY_SETTING", Int), "7",                         \
    CLI("--test_only_setting", "A setting only a test has"), RANGE(v >= 1, "an integer >= 1", ""),                  \
    ACC(int, test_only_setting), "a setting only a test has")
#else
#define XLAUNCH_SETTINGS_TEST_ONLY(X, S)
#endif
// clang-format on

// The sections, as LaunchConfig holds them: XLAUNCH_SETTINGS_<SECTION>(X, prefix).
#define XLAUNCH_TOP_LEVEL_SETTINGS(X) \
  XLAUNCH_SETTINGS_JOB(X, ) XLAUNCH_SETTINGS_OBSERVE(X, ) XLAUNCH_SETTINGS_PREEMPT(X, )

// Every row, in the order the file is written (and the config reference lists them).
#define XLAUNCH_SETTINGS(X)                                                                         \
  XLAUNCH_SETTINGS_JOB(X, ) XLAUNCH_SETTINGS_MPI(X, mpi.) XLAUNCH_SETTINGS_DDP(X, ddp.)              \
  XLAUNCH_SETTINGS_FSDP(X, fsdp.) XLAUNCH_SETTINGS_OPTIMIZER(X, optimizer.) XLAUNCH_SETTINGS_LOADER(X, loader.) XLAUNCH_SETTINGS_OBSERVE(X, ) XLAUNCH_SETTINGS_CHECKPOINT(X, checkpoint.) \
  XLAUNCH_SETTINGS_PREEMPT(X, )

// Taking a row's columns apart. XLAUNCH_WHEN_ENV(env, M, args...) is M(constant, "NAME", Type,
// args...) for ENV(...) and nothing for NO_ENV; XLAUNCH_WHEN_CLI(cli, M, args...) is M(names, help,
// args...) for CLI(...); XLAUNCH_WHEN_ACC(runtime, M, args...) is M(type, field, args...) for ACC;
// XLAUNCH_WHEN_ACCELERATOR(runtime, M, args...) is M(path, args...) for ACC and ACC_AT, the member
// of AcceleratorOptions that from_env() sets; XLAUNCH_WHEN_LOADER(runtime, M, args...) is
// M(field, args...) for LOADER. Each needs at least one of args.
// Each family has its own steps, so that one may be used inside another's M.
#define XLAUNCH_SETTINGS_APPLY_ENV(M, ...) M(__VA_ARGS__)
#define XLAUNCH_SETTINGS_ENV_0(...)
#define XLAUNCH_SETTINGS_ENV_1(M, ...) M(__VA_ARGS__)
#define XLAUNCH_SETTINGS_ENV_(M, has, a, b, c, ...) XLAUNCH_SETTINGS_ENV_##has(M, a, b, c, __VA_ARGS__)
#define XLAUNCH_SETTINGS_SPLIT_ENV(constant, name, type) 1, constant, name, type
#define XLAUNCH_SETTINGS_SPLIT_NO_ENV 0, _, _, _
#define XLAUNCH_WHEN_ENV(env, M, ...) \
  XLAUNCH_SETTINGS_APPLY_ENV(XLAUNCH_SETTINGS_ENV_, M, XLAUNCH_SETTINGS_SPLIT_##env, __VA_ARGS__)

#define XLAUNCH_SETTINGS_APPLY_CLI(M, ...) M(__VA_ARGS__)
#define XLAUNCH_SETTINGS_CLI_0(...)
#define XLAUNCH_SETTINGS_CLI_1(M, ...) M(__VA_ARGS__)
#define XLAUNCH_SETTINGS_CLI_(M, has, a, b, ...) XLAUNCH_SETTINGS_CLI_##has(M, a, b, __VA_ARGS__)
#define XLAUNCH_SETTINGS_SPLIT_CLI(names, help) 1, names, help
#define XLAUNCH_SETTINGS_SPLIT_NO_CLI 0, _, _
#define XLAUNCH_WHEN_CLI(cli, M, ...) \
  XLAUNCH_SETTINGS_APPLY_CLI(XLAUNCH_SETTINGS_CLI_, M, XLAUNCH_SETTINGS_SPLIT_##cli, __VA_ARGS__)

#define XLAUNCH_SETTINGS_APPLY_ACC(M, ...) M(__VA_ARGS__)
#define XLAUNCH_SETTINGS_ACC_0(...)
#define XLAUNCH_SETTINGS_ACC_1(M, ...) M(__VA_ARGS__)
#define XLAUNCH_SETTINGS_ACC_(M, has, a, b, ...) XLAUNCH_SETTINGS_ACC_##has(M, a, b, __VA_ARGS__)
#define XLAUNCH_SETTINGS_SPLIT_ACC(type, field) 1, type, field
#define XLAUNCH_SETTINGS_SPLIT_ACC_AT(path) 0, _, _
#define XLAUNCH_SETTINGS_SPLIT_LOADER(field) 0, _, _
#define XLAUNCH_SETTINGS_SPLIT_READ_BY(what) 0, _, _
#define XLAUNCH_SETTINGS_SPLIT_LAUNCHER 0, _, _
#define XLAUNCH_WHEN_ACC(runtime, M, ...) \
  XLAUNCH_SETTINGS_APPLY_ACC(XLAUNCH_SETTINGS_ACC_, M, XLAUNCH_SETTINGS_SPLIT_##runtime, __VA_ARGS__)

#define XLAUNCH_SETTINGS_APPLY_AT(M, ...) M(__VA_ARGS__)
#define XLAUNCH_SETTINGS_AT_0(...)
#define XLAUNCH_SETTINGS_AT_1(M, ...) M(__VA_ARGS__)
#define XLAUNCH_SETTINGS_AT_(M, has, a, ...) XLAUNCH_SETTINGS_AT_##has(M, a, __VA_ARGS__)
#define XLAUNCH_SETTINGS_AT_ACC(type, field) 1, field
#define XLAUNCH_SETTINGS_AT_ACC_AT(path) 1, path
#define XLAUNCH_SETTINGS_AT_LOADER(field) 0, _
#define XLAUNCH_SETTINGS_AT_READ_BY(what) 0, _
#define XLAUNCH_SETTINGS_AT_LAUNCHER 0, _
#define XLAUNCH_WHEN_ACCELERATOR(runtime, M, ...) \
  XLAUNCH_SETTINGS_APPLY_AT(XLAUNCH_SETTINGS_AT_, M, XLAUNCH_SETTINGS_AT_##runtime, __VA_ARGS__)

#define XLAUNCH_SETTINGS_APPLY_LOADER(M, ...) M(__VA_ARGS__)
#define XLAUNCH_SETTINGS_LOADER_0(...)
#define XLAUNCH_SETTINGS_LOADER_1(M, ...) M(__VA_ARGS__)
#define XLAUNCH_SETTINGS_LOADER_(M, has, a, ...) XLAUNCH_SETTINGS_LOADER_##has(M, a, __VA_ARGS__)
#define XLAUNCH_SETTINGS_IN_LOADER_ACC(type, field) 0, _
#define XLAUNCH_SETTINGS_IN_LOADER_ACC_AT(path) 0, _
#define XLAUNCH_SETTINGS_IN_LOADER_LOADER(field) 1, field
#define XLAUNCH_SETTINGS_IN_LOADER_READ_BY(what) 0, _
#define XLAUNCH_SETTINGS_IN_LOADER_LAUNCHER 0, _
#define XLAUNCH_WHEN_LOADER(runtime, M, ...) \
  XLAUNCH_SETTINGS_APPLY_LOADER(XLAUNCH_SETTINGS_LOADER_, M, XLAUNCH_SETTINGS_IN_LOADER_##runtime, __VA_ARGS__)

// XLAUNCH_BY_CHECK(check, P, args...) is P##RANGE(condition, allowed, hint, args...) for RANGE,
// P##ANY(_, "", "", args...), P##ONE_OF(names, "", hint, args...) or P##BY_HAND(_, allowed, "",
// args...): code generated for each kind of check. At least one of args.
#define XLAUNCH_SETTINGS_APPLY_CHECK(M, ...) M(__VA_ARGS__)
#define XLAUNCH_SETTINGS_CHECK_RANGE(condition, allowed, hint) RANGE, condition, allowed, hint
#define XLAUNCH_SETTINGS_CHECK_ANY ANY, _, "", ""
#define XLAUNCH_SETTINGS_CHECK_ONE_OF(names, hint) ONE_OF, names, "", hint
#define XLAUNCH_SETTINGS_CHECK_BY_HAND(allowed) BY_HAND, _, allowed, ""
#define XLAUNCH_SETTINGS_BY_CHECK_(P, kind, a, b, c, ...) P##kind(a, b, c, __VA_ARGS__)
#define XLAUNCH_BY_CHECK(check, P, ...) \
  XLAUNCH_SETTINGS_APPLY_CHECK(XLAUNCH_SETTINGS_BY_CHECK_, P, XLAUNCH_SETTINGS_CHECK_##check, __VA_ARGS__)
