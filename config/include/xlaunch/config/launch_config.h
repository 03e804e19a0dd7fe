// The LaunchConfig schema: every setting `xlaunch run` reads from a config file, with its default.
// This struct is the one place the schema is spelled; config_io.h loads, validates and saves it.
// A setting that travels to the ranks takes its default from its XLAUNCH_* variable's declaration
// (env_vars.h), the one place defaults are spelled.
//
// Key names and meanings follow Accelerate's default_config.yaml where the concept exists
// (docs/config-reference.md lists every key with its Accelerate equivalent). xlaunch's own
// settings live in the mpi, ddp and loader sections.
#pragma once

#include <string>
#include <vector>

#include "xlaunch/env_vars.h"

namespace xlaunch::config {

// The config_version this build writes. Files with a higher version are refused; lower ones are
// upgraded on load.
inline constexpr int kConfigVersion = 1;

enum class DistributedType { No, MultiCpu, MultiGpu };
enum class MixedPrecision { No, Fp16, Bf16 };

// "NO" / "MULTI_CPU" / "MULTI_GPU" and "no" / "fp16" / "bf16": the spellings in the file.
const char* to_string(DistributedType t);
const char* to_string(MixedPrecision m);

struct MpiSection {
  std::string hostfile;                 // Open MPI hostfile; empty: none
  std::vector<std::string> hosts;       // several machines without a hostfile: mpirun -H
  std::string bind_to = "none";         // mpirun --bind-to; ranks run several threads each
  std::string map_by;                   // mpirun --map-by; empty: slot (one machine), ppr:N:node (several)
  std::vector<std::string> extra_args;  // appended to mpirun's options as given
};

struct DdpSection {
  double bucket_cap_mb = env::default_float(env::kBucketCapMb);
  bool find_unused_parameters = env::default_bool(env::kFindUnusedParameters);
  bool broadcast_buffers = env::default_bool(env::kBroadcastBuffers);
  // How each gradient bucket travels (PyTorch's DDP communication hooks): none (as it is), fp16 or
  // bf16 (cast, reduce, cast back: half the bytes), powersgd (low-rank, with error feedback).
  std::string comm_hook = env::default_string(env::kCommHook);
  // The rank of PowerSGD's approximation of each weight matrix.
  int powersgd_rank = static_cast<int>(env::default_int(env::kPowerSgdRank));
  // Synced backward passes reduced exactly before PowerSGD starts.
  int powersgd_start_step = static_cast<int>(env::default_int(env::kPowerSgdStartStep));
  // Sharded data parallelism (docs/memory.md): 0 none, 1 optimizer state, 2 optimizer state and
  // gradients sharded over the ranks.
  int zero_stage = static_cast<int>(env::default_int(env::kZeroStage));
};

struct LoaderSection {
  static constexpr int kAutoWorkers = -1;  // "auto" in the file: the runtime picks
  int num_workers = static_cast<int>(env::default_int(env::kNumWorkers));
  bool pin_memory = env::default_bool(env::kPinMemory);
  // false: no padding, each sample once; ranks whose data ends first join the others (Accelerate's
  // DataLoaderConfiguration.even_batches).
  bool even_batches = env::default_bool(env::kEvenBatches);
  int prefetch_factor = static_cast<int>(env::default_int(env::kPrefetchFactor));
};

// Named checkpoints in project_dir (Accelerate's ProjectConfiguration: total_limit, and when the
// runtime saves one without being asked).
struct CheckpointSection {
  int total_limit = static_cast<int>(env::default_int(env::kCheckpointTotalLimit));  // 0: keep all
  int every_n_steps = static_cast<int>(env::default_int(env::kCheckpointEveryNSteps));  // 0: never
  bool every_epoch = env::default_bool(env::kCheckpointEveryEpoch);
};

// The signals preempt_signal accepts, as the file spells them: the one a scheduler sends `xlaunch
// run` before it ends the job (Slurm's --signal, Kubernetes' SIGTERM before SIGKILL).
inline constexpr const char* kPreemptSignals[] = {"SIGTERM", "SIGUSR1"};

struct LaunchConfig {
  int config_version = kConfigVersion;
  std::string compute_environment = "LOCAL_MACHINE";
  DistributedType distributed_type = DistributedType::No;
  int num_processes = 1;   // in total, over all machines (as in Accelerate); with MIN:MAX, at MAX machines
  // The file spells it N, or MIN:MAX for an elastic job (torchrun's --nnodes MIN:MAX): num_machines
  // holds N or MAX, min_machines MIN (0: not elastic). An elastic job starts on up to MAX of the
  // listed machines that answer, and a restart continues on those still there, at least MIN.
  int num_machines = 1;
  int min_machines = 0;
  int machine_rank = 0;
  std::string main_process_ip;  // empty: this machine
  int main_process_port = 0;    // 0: the launcher picks a free port
  std::vector<int> gpu_ids;     // empty: all GPUs of the machine
  MixedPrecision mixed_precision = MixedPrecision::No;
  int gradient_accumulation_steps = static_cast<int>(env::default_int(env::kGradAccumSteps));
  bool use_cpu = env::default_bool(env::kUseCpu);
  bool debug = env::default_bool(env::kDebug);
  // acc.prepare converts BatchNorm1d/2d/3d to SyncBatchNorm: batch statistics over every rank.
  bool sync_batchnorm = env::default_bool(env::kSyncBatchnorm);
  // Intra-op threads of each rank; 0: the runtime decides.
  int num_cpu_threads_per_process = static_cast<int>(env::default_int(env::kNumCpuThreads));
  MpiSection mpi;
  DdpSection ddp;
  LoaderSection loader;
  std::string log_dir = env::default_string(env::kLogDir);  // empty: no per-rank logs
  int max_restarts = 0;
  // Elastic jobs: a machine whose rank was at fault in this many failed attempts is kept out of the
  // later ones (Horovod's blacklist), even when it answers again.
  int max_machine_failures = 2;
  // Seconds a collective may make no progress before the watchdog ends the job; 0: no watchdog.
  int timeout_s = static_cast<int>(env::default_int(env::kTimeoutS));
  // Per-step phases, and the utilization report at the end of the job.
  bool report = env::default_bool(env::kReport);
  // Empty: no timeline; else DIR/trace.json and DIR/report.html.
  std::string trace_dir = env::default_string(env::kTraceDir);
  // Steps in the timeline, after the warm-up.
  int trace_steps = static_cast<int>(env::default_int(env::kTraceSteps));
  // Steps profiled operator by operator after the warm-up (the report's operator table); 0: none.
  int profile_ops = static_cast<int>(env::default_int(env::kProfileOps));
  // The operator profile records input shapes.
  bool record_shapes = env::default_bool(env::kRecordShapes);
  // cuDNN autotuning for each new input shape (torch.backends.cudnn.benchmark).
  bool cudnn_benchmark = env::default_bool(env::kCudnnBenchmark);
  // Deterministic algorithms only, cuDNN's included (and no autotuning).
  bool deterministic = env::default_bool(env::kDeterministic);
  // Experiment tracking (docs/tracking.md): where acc.log writes, some of kLogWith ("all" in a file
  // or on the command line stands for every one); empty: acc.log writes nothing. The tracker's
  // files go to <project_dir>/<project_name>.
  std::vector<std::string> log_with;
  // With a tracker on: the ranks' utilization goes to it every this many optimizer steps.
  int report_interval = static_cast<int>(env::default_int(env::kReportInterval));
  // With TensorBoard on: weight and gradient histograms every this many optimizer steps; 0: none.
  int log_histograms_every_n_steps = static_cast<int>(env::default_int(env::kLogHistogramsEvery));
  // The project directory (Accelerate's ProjectConfiguration.project_dir): named checkpoints go to
  // <project_dir>/checkpoints, and `xlaunch run --resume` and restarts continue from the newest.
  std::string project_dir = env::default_string(env::kProjectDir);  // empty: none
  CheckpointSection checkpoint;
  // The signal that means "this job is being preempted": the first one `xlaunch run` receives asks
  // the ranks to checkpoint and stop (xlaunch/preemption.h); one of kPreemptSignals.
  std::string preempt_signal = "SIGTERM";
  // Seconds `xlaunch run` gives the ranks, after passing on a preemption, before it ends the job.
  int preempt_timeout_s = 120;
};

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
