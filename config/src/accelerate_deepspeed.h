// Accelerate's DeepSpeed settings (`distributed_type: DEEPSPEED` with a `deepspeed_config:` section,
// or the DeepSpeed JSON file its `deepspeed_config_file` names), read as xlaunch's own ZeRO stages
// (ddp.zero_stage, docs/memory.md). What maps cleanly is taken over with a note that `xlaunch run`
// prints in its first lines; what xlaunch cannot honour (stage 3, offload, zero3_init_flag, an
// optimizer DeepSpeed would build) is refused naming the key and the fix; engine tuning knobs that
// mean nothing here are named in a note as ignored.
#pragma once

#include <yaml-cpp/yaml.h>

#include <optional>
#include <string>
#include <vector>

#include "xlaunch/config/config_io.h"

namespace xlaunch::config::detail {

// What a DeepSpeed config asks for that xlaunch honours, in xlaunch's terms.
struct DeepSpeedSettings {
  int zero_stage = 2;  // Accelerate's DeepSpeedPlugin default when the file gives none
  std::string stage_source;                          // "deepspeed_config zero_stage 2", for the note
  int stage_line = 0;                                // where the stage was given (0: not given)
  std::optional<int> accumulation_steps;            // unset, or "auto": the rest of the config decides
  std::string hostfile;                              // deepspeed_hostfile: "host slots=N" lines, as Open MPI's
  std::optional<std::string> mixed_precision;        // a JSON file's fp16/bf16 "enabled": true
  std::vector<std::string> notes;                    // ignored keys, each with why
};

// Reads an Accelerate file's `deepspeed_config:` mapping (null: empty). Reads the JSON file that
// deepspeed_config_file names (relative paths from the current directory, as Accelerate's launcher
// passes it on). Throws ConfigError naming `file`, "deepspeed_config.<key>" and its line for what
// cannot be honoured.
DeepSpeedSettings read_deepspeed_section(const YAML::Node& section, const std::string& file);

// Reads a DeepSpeed JSON config's text (`file` names it in messages): zero_optimization.stage and
// its offload_optimizer / offload_param devices, the accumulation steps, gradient_clipping,
// fp16 / bf16, optimizer and scheduler. Throws ConfigError for malformed JSON and for what cannot
// be honoured, naming the JSON key.
DeepSpeedSettings read_deepspeed_json(const std::string& text, const std::string& file);

// For a file with `distributed_type: DEEPSPEED`: reads its deepspeed_config and applies it to
// `out` (ddp.zero_stage, the accumulation steps, mpi.hostfile, MULTI_CPU with use_cpu); adds
// the run-start note ("accelerate config: deepspeed_config zero_stage 2 (no offload) runs as xlaunch
// ddp.zero_stage 2 (docs/memory.md)") and the ignored keys to out.notes. A value the file also
// sets under xlaunch's own key must agree, else ConfigError naming both.
void apply_deepspeed(const YAML::Node& root, LoadedConfig& out);

}  // namespace xlaunch::config::detail
