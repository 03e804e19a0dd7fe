#include "launch/job.h"

#include <signal.h>

namespace xlaunch::launcher {

int run_plan(const LaunchPlan& plan) {
  SpawnOptions o;
  o.forwarded = {SIGINT, SIGTERM, SIGHUP};
  // A Ctrl-C at the terminal reaches mpirun directly (it is in our process group); forwarding it
  // as well would count as a second Ctrl-C, which makes mpirun kill the job without letting the
  // ranks clean up. Signals from kill(1) and friends are forwarded.
  o.forward_kernel_signals = false;
  o.env = plan.env;
  return spawn_and_wait(plan.argv, o);
}

}  // namespace xlaunch::launcher
