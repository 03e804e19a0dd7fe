// `xlaunch test [--config_file F] [-- selftest args]`: launches the bundled self-check program,
// xlaunch_selftest (launcher/selftest/selftest.cpp), exactly as `xlaunch run` would launch a
// training binary with the same config, like `accelerate test`. Its ranks check the collectives,
// the sampler, DDP gradients and the GradScaler; rank 0 prints one line per check and a final
// verdict. The exit code is the job's: 0 only when every check passed on every rank.
#include <unistd.h>

#include <memory>

#include "cli/cmd_run.h"
#include "cli/subcommand.h"
#include "launch/launch_error.h"
#include "launch/programs.h"

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

// `xlaunch run [--config_file F] xlaunch_selftest [args]`, through run's own function: the config,
// the checks before launch, the launch plan and the exit report are run's.
int test(const TestOptions& o, const Invocation& inv) {
  RunOptions run;
  run.config_file = o.config_file;
  Invocation launch = inv;
  launch.command = {find_selftest(o, inv.self_exe)};
  launch.command.insert(launch.command.end(), inv.command.begin(), inv.command.end());
  return run_job(run, launch);
}

}  // namespace

Runner setup_test(CLI::App* cmd) {
  auto o = std::make_shared<TestOptions>();
  cmd->add_option("--config_file", o->config_file, "Config file (default: as for `xlaunch run`)");
  cmd->add_option("--selftest_bin", o->selftest_bin, std::string("The self-test program (default: ") + kSelftestName +
                                                         " next to the xlaunch binary)");
  cmd->footer("Usage: xlaunch test [--config_file F] [-- selftest options]\n"
              "Prints one line per check and a final verdict; exit code 0 only when all passed.");
  return [o](const Invocation& inv) { return test(*o, inv); };
}

}  // namespace xlaunch::launcher
