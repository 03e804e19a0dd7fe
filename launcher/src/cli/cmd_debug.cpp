// `xlaunch debug DIR`: every rank's last collectives (the flight recorder, docs/failures.md), from a
// job's status directory while it runs, or from what a failed attempt saved in its log_dir.
#include <memory>

#include "cli/subcommand.h"
#include "observe/flight_report.h"

namespace xlaunch::launcher {

Runner setup_debug(CLI::App* cmd) {
  auto dir = std::make_shared<std::string>();
  cmd->add_option("dir", *dir,
                  "A job's status directory (xlaunch-status-..., while it runs), or the log_dir of a failed run")
      ->required();
  cmd->footer("Prints `last collectives:` (each rank's last collectives: op, size, state, times) and what they show:\n"
              "a desync (ranks in different collectives of one number) or a straggler (a rank that never entered\n"
              "the collective the others wait in). Exit code 0, or 2 when DIR holds neither.");
  return [dir](const Invocation&) { return print_flight(stdout, *dir); };
}

}  // namespace xlaunch::launcher
