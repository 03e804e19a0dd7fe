// The subcommand registry. Each cmd_*.cpp registers itself with one line at namespace scope:
//   const bool registered = register_subcommand({"run", &setup_run, /*takes_command=*/true});
// main() adds every registered subcommand to the CLI11 app and runs the one the user chose.
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

struct Subcommand {
  const char* name;
  Runner (*setup)(CLI::App& app);  // adds the subcommand and its options; returns what runs it
  bool takes_command = false;      // everything from the first positional on is passed through
};

bool register_subcommand(const Subcommand& s);
const std::vector<Subcommand>& registered_subcommands();

}  // namespace xlaunch::launcher
