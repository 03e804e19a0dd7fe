// Accelerate's FSDP settings (`distributed_type: FSDP` with an `fsdp_config:` section), read as
// xlaunch's ZeRO stage 3 (ddp.zero_stage and the fsdp section, docs/memory.md). What maps is taken
// over with a note `xlaunch run` prints in its first lines:
//   fsdp_sharding_strategy FULL_SHARD (1) / SHARD_GRAD_OP (2) / NO_SHARD (3), or fsdp_version 2's
//   fsdp_reshard_after_forward  ->  zero_stage 3 with reshard_after_forward true / false, or 0;
//   fsdp_backward_prefetch NO_PREFETCH  ->  fsdp.prefetch 0;
//   fsdp_activation_checkpointing true  ->  fsdp.activation_checkpointing true (stage 3 only);
//   fsdp_auto_wrap_policy NO_WRAP  ->  fsdp.wrap none; TRANSFORMER_BASED_WRAP with
//   fsdp_transformer_layer_cls_to_wrap A,B  ->  type:A,B; SIZE_BASED_WRAP with fsdp_min_num_params N
//   ->  size:N (Accelerate's default 100000000 when absent). Without a policy xlaunch keeps its
//   own default (auto, where Accelerate wraps nothing), and says so in a note.
// What xlaunch cannot honour (hybrid sharding, offload) is refused naming
// the key and the fix; the knobs that mean nothing here are named in a note as ignored, with why.
#pragma once

#include <yaml-cpp/yaml.h>

#include "xlaunch/config/config_io.h"

namespace xlaunch::config::detail {

// For a file with `distributed_type: FSDP`: reads its fsdp_config (absent or null: Accelerate's
// defaults, FULL_SHARD) and applies it to `out` (MULTI_GPU, MULTI_CPU with use_cpu; ddp.zero_stage,
// fsdp.reshard_after_forward, fsdp.prefetch, fsdp.activation_checkpointing, fsdp.wrap). A value the file also sets under xlaunch's own key
// must agree, else ConfigError naming both. Throws ConfigError naming "fsdp_config.<key>" and its line.
void apply_fsdp(const YAML::Node& root, LoadedConfig& out);

}  // namespace xlaunch::config::detail
