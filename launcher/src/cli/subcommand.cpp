#include "cli/subcommand.h"

namespace xlaunch::launcher {

const std::vector<Subcommand>& subcommands() {
  static const std::vector<Subcommand> table = {
      {"config", "Ask a few questions and write the launch config", &setup_config, false},
      {"env", "Print versions, hardware and the config in use, for bug reports", &setup_env, false},
      {"run", "Launch train_bin on every rank through Open MPI's mpirun", &setup_run, true},
      {"merge-weights", "Write the full model(s) of a checkpoint as safetensors (as `accelerate merge-weights`)",
       &setup_merge_weights, false},
      {"test", "Check the setup: launch xlaunch's self-test with the config, as `run` would", &setup_test, true},
      {"debug", "Print every rank's last collectives (the flight recorder) of a running job or a failed run",
       &setup_debug, false},
  };
  return table;
}

}  // namespace xlaunch::launcher
