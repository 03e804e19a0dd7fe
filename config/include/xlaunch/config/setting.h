// The settings table (xlaunch/settings.h) as the launcher walks it at run time: one Setting per
// row, in the table's order, with its key, option, variable, default, allowed values and meaning,
// and the value a LaunchConfig holds for it. The launch plan exports from it, `xlaunch run` takes
// its options and the user's variables through it, and the config reference is printed from it.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "xlaunch/config/launch_config.h"

namespace xlaunch::config {

struct Setting {
  std::string key;            // dotted: "ddp.bucket_cap_mb"
  std::string type;           // as the docs name it: "int", "bool", "number", "string", "list"... or the values
                              // of a ONE_OF row ("`no`, `fp16`, `bf16`")
  const env::Var* var;        // the variable that carries it to the ranks; nullptr: the launcher's own
  std::string cli;            // `xlaunch run`'s option, as CLI11 spells it ("-n,--num_processes"); "": none
  std::string cli_help;
  std::string default_value;  // as the file spells it
  std::string allowed;        // what validate() accepts; "": any value of the type
  std::string meaning;
  // The value c holds, as its variable carries it ("1"/"0" for a bool, a comma list for a list).
  std::function<std::string(const LaunchConfig& c)> text;
  // Sets this setting of `to` to from's value.
  std::function<void(LaunchConfig& to, const LaunchConfig& from)> copy;
};

// Every row, in the table's order (the order of the file).
const std::vector<Setting>& settings_table();

// The row of a key ("ddp.zero_stage"); nullptr for none.
const Setting* find_setting(const std::string& key);

// The row a variable carries (env::kZeroStage: ddp.zero_stage). Requires that it
// carries one.
const Setting& setting_of(const env::Var& var);

// "ddp.zero_stage (now 2)": how a message names a key and the value c holds.
std::string key_and_value(const LaunchConfig& c, const env::Var& var);

// Reads `text` as the file reads the key's value (types and spellings; ranges and relations are
// validate()'s) into c. Throws ConfigError naming `source` and the key.
void read_setting(LaunchConfig& c, const std::string& key, const std::string& text, const std::string& source);

// The environment `xlaunch run` starts in, as a name -> value map (only what is set).
using EnvMap = std::map<std::string, std::string>;

// Precedence's second layer (xlaunch/settings.h): each setting whose XLAUNCH_* variable is set in
// `user_env` takes its value, read as the file's would be. Returns the keys set, in table order.
// Throws ConfigError naming the variable for a value the key does not accept.
std::vector<std::string> apply_environment(LaunchConfig& c, const EnvMap& user_env);

// The key table of docs/config-reference.md: one Markdown row per setting.
std::string settings_markdown();

}  // namespace xlaunch::config
