// The subcommands of `xlaunch`, listed in one table (subcommand.cpp), as Accelerate's CLI lists
// its commands. Each cmd_*.cpp defines the setup function declared here; main() adds every
// subcommand of the table to the app, calls its setup, then runs the one the user chose.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace xlaunch::launcher {

struct Invocation {
  std::vector<std::string> command;  // for takes_command subcommands: train_bin and its arguments
  std::string self_exe;              // this xlaunch binary, absolute
};

using Runner = std::function<int(const Invocation&)>;  // returns the exit code

// Each adds its options (and nested subcommands) to `cmd`; returns what runs it.
Runner setup_config(CLI::App* cmd);  // cmd_config.cpp
Runner setup_debug(CLI::App* cmd);   // cmd_debug.cpp
Runner setup_env(CLI::App* cmd);     // cmd_env.cpp
Runner setup_merge_weights(CLI::App* cmd);  // cmd_merge_weights.cpp
Runner setup_run(CLI::App* cmd);     // cmd_run.cpp
Runner setup_test(CLI::App* cmd);    // cmd_test.cpp

struct Subcommand {
  const char* name;
  const char* description;  // the line `xlaunch --help` shows
  Runner (*setup)(CLI::App* cmd);
  bool takes_command = false;  // everything from the first positional on is passed through
};

// Every subcommand, in the order `xlaunch --help` lists them.
const std::vector<Subcommand>& subcommands();

}  // namespace xlaunch::launcher
