// AcceleratorOptions::from_env: the launched job's settings, from the XLAUNCH_* variables.
#include "xlaunch/accelerator_options.h"

namespace xlaunch {

AcceleratorOptions AcceleratorOptions::from_env() {
  AcceleratorOptions o;
  o.mixed_precision = env::get_string(env::kMixedPrecision);
  o.gradient_accumulation_steps = static_cast<int>(env::get_int(env::kGradAccumSteps));
  o.cpu = env::get_bool(env::kUseCpu);
  o.gpu_ids = env::get_string(env::kGpuIds);
  o.ddp.bucket_cap_mb = env::get_float(env::kBucketCapMb);
  o.ddp.find_unused_parameters = env::get_bool(env::kFindUnusedParameters);
  o.ddp.comm_hook = env::get_string(env::kCommHook);
  o.ddp.powersgd_rank = static_cast<int>(env::get_int(env::kPowerSgdRank));
  o.ddp.powersgd_start_step = env::get_int(env::kPowerSgdStartStep);
  o.ddp.zero_stage = static_cast<int>(env::get_int(env::kZeroStage));
  o.broadcast_buffers = env::get_bool(env::kBroadcastBuffers);
  o.sync_batchnorm = env::get_bool(env::kSyncBatchnorm);
  o.project_dir = env::get_string(env::kProjectDir);
  o.checkpoint_total_limit = env::get_int(env::kCheckpointTotalLimit);
  o.checkpoint_every_n_steps = env::get_int(env::kCheckpointEveryNSteps);
  o.checkpoint_every_epoch = env::get_bool(env::kCheckpointEveryEpoch);
  o.resume = env::get_string(env::kResume);
  o.log_with = split_log_with(env::get_string(env::kLogWith));
  o.report_interval = env::get_int(env::kReportInterval);
  o.log_histograms_every_n_steps = env::get_int(env::kLogHistogramsEvery);
  o.cudnn_benchmark = env::get_bool(env::kCudnnBenchmark);
  o.deterministic = env::get_bool(env::kDeterministic);
  o.profile_ops = env::get_int(env::kProfileOps);
  o.record_shapes = env::get_bool(env::kRecordShapes);
  return o;
}

}  // namespace xlaunch
