// AcceleratorOptions: every setting of an Accelerator, with the defaults of the XLAUNCH_* variables
// (env_vars.h). Accelerator's constructor takes one; from_env() reads the launched job's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "xlaunch/env_vars.h"
#include "xlaunch/grad_scaler.h"
#include "xlaunch/reducer.h"
#include "xlaunch/settings.h"

namespace xlaunch {

// The settings `xlaunch run` controls are the rows of xlaunch/settings.h that say ACC(type, field):
// each is a field here, named and typed by the row, starting from the row's default, and read by
// from_env() from its variable. Among them:
//   mixed_precision   no | fp16 | bf16 (fp16 adds a GradScaler).
//   cpu               train on the CPU even where GPUs exist.
//   gpu_ids           GPUs of this machine; local rank i takes the i-th. The constructor makes it the
//                     calling thread's current CUDA device, so torch::kCUDA without an index means
//                     this rank's GPU.
//   broadcast_buffers rank 0's buffers before each training forward.
//   sync_batchnorm    prepare(model) converts the model's BatchNorm1d/2d/3d to SyncBatchNorm
//                     (sync_batchnorm.h).
//   project_dir, checkpoint_total_limit, checkpoint_every_n_steps, checkpoint_every_epoch
//                     named checkpoints (docs/checkpointing.md): save_state() writes
//                     <project_dir>/checkpoints/checkpoint_<step>, keeping the newest
//                     checkpoint_total_limit (0: all); saved by themselves every
//                     checkpoint_every_n_steps optimizer steps (0: never) and at the end of every
//                     epoch of the first prepared loader (checkpoint_every_epoch).
//   log_with, report_interval, log_histograms_every_n_steps
//                     experiment tracking (docs/tracking.md): the trackers acc.log writes to, in
//                     <project_dir>/<project_name>: any of "tensorboard", "jsonl", "csv"; empty:
//                     none. With one on, the ranks' utilization goes to it every report_interval
//                     optimizer steps, and with TensorBoard the prepared models' weight and gradient
//                     histograms every log_histograms_every_n_steps (0: none).
//   cudnn_benchmark, deterministic
//                     process-wide, applied by the constructor before any prepare (docs/
//                     performance.md#deterministic-runs-and-cudnn-autotuning): cuDNN times its
//                     algorithms for each new input shape and keeps the fastest; or deterministic
//                     algorithms only (cuDNN's included, CUBLAS_WORKSPACE_CONFIG=:4096:8 set when
//                     unset), where an operation without one fails with a UsageError naming it. Not
//                     both. false changes nothing: what the program set in LibTorch's context stays.
//   profile_ops, record_shapes
//                     the operator profile (docs/performance.md): LibTorch's profiler over this many
//                     optimizer steps after the warm-up (at most 1000), its table printed by
//                     `xlaunch run`; 0: off. A run that ends sooner publishes the steps it profiled
//                     when the Accelerator is destroyed. record_shapes: rows per input shapes.
//   and the micro-steps per optimizer step (see accumulate()).
// Rows that say ACC_AT(ddp.x) fill ReducerOptions (reducer.h) the same way.
#define XLAUNCH_ACCELERATOR_FIELD(type, field, dflt) type field = settings::default_of<type>(dflt);
#define XLAUNCH_ACCELERATOR_ROW(S, name, type, env, dflt, cli, check, runtime, meaning) \
  XLAUNCH_WHEN_ACC(runtime, XLAUNCH_ACCELERATOR_FIELD, dflt)

struct AcceleratorOptions {
  XLAUNCH_SETTINGS(XLAUNCH_ACCELERATOR_ROW)
  GradScalerOptions scaler;  // used with fp16
  // Accelerate's GradientAccumulationPlugin name: the optimizer also steps on the last batch of
  // the first prepared loader's epoch, however many micro-steps its window had, and the next
  // epoch starts a new window (see accumulate()).
  bool sync_with_dataloader = true;
  ReducerOptions ddp;  // buckets, unused parameters, communication hook (reducer.h)
  // CPU gradient allreduce: "auto" uses shared memory when every rank is on this machine (see
  // shm_communicator.h), shared memory inside machines and MPI between them when the job spans
  // several machines of several ranks each (hierarchical_communicator.h), else MPI; "mpi" always
  // a flat MPI allreduce over every rank.
  std::string cpu_allreduce = "auto";
  // Intra-op threads per rank on CPU; 0: cores / local ranks when OMP_NUM_THREADS is unset.
  int num_threads = static_cast<int>(env::default_int(env::kNumCpuThreads));
  // What maybe_load_state() loads: "latest", a checkpoint directory, or "" (nothing).
  std::string resume = env::default_string(env::kResume);
  // The largest value gather_object / broadcast_object send, in bytes once encoded
  // (object_codec.h); a larger one is refused on every rank. The MPI transport carries at most
  // 128 MiB per rank in one collective.
  int64_t max_object_bytes = int64_t{64} << 20;

  // From the XLAUNCH_* variables (see env_vars.h). Throws UsageError on malformed values.
  static AcceleratorOptions from_env();
  // XLAUNCH_LOG_WITH's comma list as names (checked by the Accelerator).
  static std::vector<std::string> split_log_with(const std::string& list);
};

#undef XLAUNCH_ACCELERATOR_ROW
#undef XLAUNCH_ACCELERATOR_FIELD

}  // namespace xlaunch
