// xlaunch: configure and launch data-parallel LibTorch training through Open MPI's mpirun.
// main() is the only place errors become exit codes: 0 success, 2 usage/config errors and
// anything refused before a launch, 1 other failures; `run` returns the job's own code.
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <vector>

#include "cli/overrides.h"
#include "cli/subcommand.h"
#include "launch/agent.h"
#include "launch/launch_error.h"
#include "launch/rank_wrapper.h"
#include "xlaunch/config/config_error.h"

using namespace xlaunch::launcher;

namespace {

std::string self_exe(const char* argv0) {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string(argv0);
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Splits `xlaunch SUB [options] train_bin args...` for a subcommand that takes a command: its
// options go to CLI11 and everything from the first positional (or after `--`) to the command.
// Options are recognised from the subcommand's own definitions, so `-n 2` skips its value.
std::vector<std::string> split_command(CLI::App& sub, std::vector<std::string>& args, size_t first) {
  size_t i = first;
  while (i < args.size()) {
    const std::string& t = args[i];
    if (t == "--") {
      std::vector<std::string> cmd(args.begin() + static_cast<long>(i) + 1, args.end());
      args.resize(i);
      return cmd;
    }
    if (t.size() < 2 || t[0] != '-') break;
    const bool long_opt = t[1] == '-';
    const std::string name = long_opt ? t.substr(0, t.find('=')) : t.substr(0, 2);
    const bool attached = long_opt ? t.find('=') != std::string::npos : t.size() > 2;
    const CLI::Option* opt = sub.get_option_no_throw(name);
    // An option whose value is optional (--resume [DIR]) takes the next word only when that is a
    // directory: a training binary never is.
    const bool optional_value = opt && opt->get_items_expected_min() == 0;
    const bool takes_next = opt && opt->get_items_expected_max() > 0 && !attached &&
                            (!optional_value || (i + 1 < args.size() && is_directory(args[i + 1])));
    i += takes_next ? 2 : 1;
  }
  std::vector<std::string> cmd(args.begin() + static_cast<long>(std::min(i, args.size())), args.end());
  args.resize(std::min(i, args.size()));
  return cmd;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "__rank") == 0) return rank_wrapper_main(argc, argv);
  if (argc > 1 && std::strcmp(argv[1], "__agent") == 0) return agent_wrapper_main(argc, argv);

  CLI::App app{"xlaunch: configure and launch data-parallel LibTorch training through Open MPI", "xlaunch"};
  app.require_subcommand(1);
  app.set_version_flag("--version", XLAUNCH_VERSION);
  struct Added {
    const Subcommand* sub;
    CLI::App* cmd;
    Runner run;
  };
  std::vector<Added> added;
  for (const Subcommand& s : subcommands()) {
    CLI::App* cmd = app.add_subcommand(s.name, s.description);
    added.push_back({&s, cmd, s.setup(cmd)});
  }

  std::vector<std::string> args(argv + 1, argv + argc);
  Invocation inv;
  inv.self_exe = self_exe(argv[0]);
  for (const Added& a : added)
    if (a.sub->takes_command && !args.empty() && a.cmd->check_name(args[0]))
      inv.command = split_command(*a.cmd, args, 1);

  const std::vector<std::string> words = args;
  std::reverse(args.begin(), args.end());  // CLI11 takes them last first
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    if (refuse_accelerate_option(app, e, words)) return 2;
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  try {
    for (const Added& a : added)
      if (a.cmd->parsed()) return a.run(inv);
  } catch (const xlaunch::config::ConfigError& e) {
    std::fprintf(stderr, "xlaunch: config error: %s\n", e.what());
    return 2;
  } catch (const LaunchError& e) {
    std::fprintf(stderr, "xlaunch: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "xlaunch: internal error: %s\n", e.what());
    return 1;
  }
  return 2;
}
