#include "observe/host_facts.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "launch/launch_error.h"
#include "launch/machine.h"

namespace xlaunch::launcher {

HostFacts this_host_facts() {
  HostFacts h;
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) == 0) h.name = name;
  h.cpus = usable_cpus();
  std::ifstream("/proc/loadavg") >> h.load;
  try {
    h.cpu = this_cpu_features();
  } catch (const LaunchError& e) {
    std::fprintf(stderr, "xlaunch: warning: %s (the report's advice leaves the CPU's flags out)\n", e.what());
  }
  return h;
}

}  // namespace xlaunch::launcher
