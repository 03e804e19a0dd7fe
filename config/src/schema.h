// The schema as a table: one Field per key, knowing how to read its value from YAML (checking the
// type and the allowed spellings) and how to write it. Loading, saving, unknown-key detection and
// default tracking all walk this one table. Ranges are checked by validate(), so the command line
// and the file share them.
#pragma once

#include <yaml-cpp/yaml.h>

#include <functional>
#include <string>
#include <vector>

#include "xlaunch/config/launch_config.h"

namespace xlaunch::config::detail {

struct FieldCtx {
  std::string file;
  std::string key;
  int line = 0;
};

struct Field {
  std::string key;      // dotted: "num_processes", "mpi.hostfile"
  std::string section;  // "" for top-level keys
  std::string leaf;     // the name inside its section
  std::function<void(const YAML::Node&, LaunchConfig&, const FieldCtx&)> read;
  std::function<void(YAML::Emitter&, const LaunchConfig&)> write;
};

const std::vector<Field>& fields();

// Section names ("mpi", "ddp", "loader"), in schema order.
const std::vector<std::string>& sections();

// Throws ConfigError for the key in ctx.
[[noreturn]] void fail(const FieldCtx& ctx, const std::string& found, const std::string& allowed,
                       const std::string& hint = "");

// How a node reads in a message: "'abc'", "a list", "a mapping", "nothing (null)".
std::string describe(const YAML::Node& n);

// 1-based line of a node; 0 when yaml-cpp has no mark.
int line_of(const YAML::Node& n);

}  // namespace xlaunch::config::detail
