// Loading, validating and saving a LaunchConfig as YAML.
//
// load_config reads a file, checks every key against the schema (unknown keys, types, ranges) and
// then validate()s the whole; anything wrong throws ConfigError naming the file, key and line.
// Accelerate's default_config.yaml files load too: the keys both share are taken, and settings only
// Accelerate has (deepspeed_config, fsdp_config, ...) are reported by name in `unsupported`.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "xlaunch/config/launch_config.h"

namespace xlaunch::config {

struct LoadedConfig {
  LaunchConfig config;
  std::string file;
  std::vector<std::string> defaulted;    // schema keys the file left out, in schema order
  std::vector<std::string> unsupported;  // Accelerate-only keys/sections found, ignored
  std::vector<std::string> notes;        // other things worth telling (e.g. a key upgraded)
  std::map<std::string, int> lines;      // key -> 1-based line in the file, for later errors
};

// Every key of the schema, dotted for sections ("mpi.hostfile"), in the order save() writes them.
const std::vector<std::string>& schema_keys();

// Reads and checks `path`. gpu_count: GPUs on this machine, for gpu_ids; nullopt: do not check.
// Throws ConfigError for an unreadable, empty or malformed file and for any bad key or value.
LoadedConfig load_config(const std::string& path, std::optional<int> gpu_count = std::nullopt);

// Same, from text already in memory; `file` names it in messages.
LoadedConfig parse_config(const std::string& text, const std::string& file,
                          std::optional<int> gpu_count = std::nullopt);

// Checks the relations between keys (machine_rank < num_machines, num_processes a multiple of
// num_machines, gpu_ids against gpu_count, ...). `file` and `lines` only enrich the message.
// Call it again after command-line overrides are applied.
void validate(const LaunchConfig& c, std::optional<int> gpu_count, const std::string& file = "",
              const std::map<std::string, int>& lines = {});

// The YAML text save_config writes: every key, in schema order.
std::string to_yaml(const LaunchConfig& c);

// Writes to_yaml(c) to `path` atomically: a temporary file in the same directory, flushed to disk,
// then renamed over `path`, so readers see the old file or the new one, never half of one.
// Creates missing parent directories. Throws ConfigError when the file cannot be written.
void save_config(const LaunchConfig& c, const std::string& path);

// Levenshtein distance, for did-you-mean suggestions.
int edit_distance(const std::string& a, const std::string& b);

}  // namespace xlaunch::config
