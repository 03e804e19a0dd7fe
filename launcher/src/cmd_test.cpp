// `xlaunch test [--config_file F] [-- selftest args]`: launches the bundled self-check program,
// xlaunch_selftest (examples/selftest.cpp), exactly as `xlaunch run` would launch a training
// binary with the same config, like `accelerate test`. Its ranks check the collectives, the
// sampler, DDP gradients and the GradScaler; rank 0 prints one line per check and a final verdict.
// The exit code is the job's: 0 only when every check passed on every rank.
#include <unistd.h>

#include <algorithm>
#include <memory>

#include "launch_error.h"
#include "programs.h"
#include "subcommand.h"

namespace xlaunch::launcher {
namespace {

constexpr const char* kSelftestName = "xlaunch_selftest";

struct TestOptions {
  std::string config_file;
  std::string selftest_bin;
};

// The self-test sits next to the xlaunch binary: in the build tree (launcher/) and where
// `cmake --install` puts both (bin/).
std::string find_selftest(const TestOptions& o, const std::string& self_exe) {
  if (!o.selftest_bin.empty()) return resolve_train_binary(o.selftest_bin, path_env());
  const std::string path = self_exe.substr(0, self_exe.rfind('/') + 1) + kSelftestName;
  if (access(path.c_str(), X_OK) == 0) return path;
  throw LaunchError(std::string(kSelftestName) + " not found next to " + self_exe +
                    ": build it (cmake --build BUILD_DIR --target xlaunch_selftest), install it beside xlaunch, "
                    "or pass --selftest_bin PATH");
}

// The same path as `xlaunch run [--config_file F] xlaunch_selftest`: run's own runner, so the
// config, the checks before launch, the launch plan and the exit report are run's.
int test(const TestOptions& o, const Invocation& inv) {
  const auto& subs = registered_subcommands();
  const auto run = std::find_if(subs.begin(), subs.end(), [](const Subcommand& s) { return std::string(s.name) == "run"; });
  if (run == subs.end()) throw LaunchError("internal: the run subcommand is not registered");
  CLI::App parent;
  const Runner runner = run->setup(parent);
  std::vector<std::string> args{"run"};
  if (!o.config_file.empty()) args.insert(args.end(), {"--config_file", o.config_file});
  std::reverse(args.begin(), args.end());  // CLI11 takes them last first
  parent.parse(args);
  Invocation launch = inv;
  launch.command = {find_selftest(o, inv.self_exe)};
  launch.command.insert(launch.command.end(), inv.command.begin(), inv.command.end());
  return runner(launch);
}

Runner setup(CLI::App& app) {
  auto o = std::make_shared<TestOptions>();
  CLI::App* cmd = app.add_subcommand("test", "Check the setup: launch xlaunch's self-test with the config, as `run` would");
  cmd->add_option("--config_file", o->config_file, "Config file (default: as for `xlaunch run`)");
  cmd->add_option("--selftest_bin", o->selftest_bin, std::string("The self-test program (default: ") + kSelftestName +
                                                         " next to the xlaunch binary)");
  cmd->footer("Usage: xlaunch test [--config_file F] [-- selftest options]\n"
              "Prints one line per check and a final verdict; exit code 0 only when all passed.");
  return [o](const Invocation& inv) { return test(*o, inv); };
}

const bool registered = register_subcommand({"test", &setup, true});

}  // namespace
}  // namespace xlaunch::launcher
