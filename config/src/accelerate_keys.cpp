#include "accelerate_keys.h"

#include <set>

namespace xlaunch::config::detail {

bool is_accelerate_only_key(const std::string& key) {
  // From accelerate/commands/config/config_args.py (ClusterConfig, SageMakerConfig) and the files
  // `accelerate config` writes.
  static const std::set<std::string> kKeys = {
      "deepspeed_config", "fsdp_config", "dynamo_config", "megatron_lm_config", "ipex_config",
      "mpirun_config", "fp8_config", "parallelism_config", "downcast_bf16", "enable_cpu_affinity",
      "main_training_function", "rdzv_backend", "same_network", "tpu_env", "tpu_use_cluster",
      "tpu_use_sudo", "tpu_name", "tpu_zone", "tpu_vm", "commands", "command_file",
      "use_mps_device", "dynamo_backend", "mlu_ids", "npu_ids", "xpu_ids", "musa_ids", "sdaa_ids",
      "hpu_ids", "tp_config",
      // SageMakerConfig: such a file is refused by its compute_environment, named.
      "ec2_instance_type", "iam_role_name", "image_uri", "profile", "region", "base_job_name",
      "pytorch_version", "transformers_version", "py_version", "sagemaker_inputs_file",
      "sagemaker_metrics_file", "additional_args"};
  return kKeys.count(key) > 0;
}

}  // namespace xlaunch::config::detail
