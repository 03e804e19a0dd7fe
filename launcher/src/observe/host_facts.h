// What the launcher knows of the machine it runs on, for the report's advice (report.h): the
// loader rule bounds the gain of more loader workers by the cores the ranks leave unused (and says
// when other work competes for them: the load average), and the mixed-precision rule needs the
// CPU's 16-bit instructions. Only this machine's: the ranks on other machines publish their host
// name, not their cores, load or flags.
#pragma once

#include <string>

#include "launch/cpu_features.h"

namespace xlaunch::launcher {

struct HostFacts {
  std::string name;  // gethostname, as the ranks publish theirs (RankStats::host); empty: not known
  int cpus = 0;      // hardware threads this process may run on (usable_cpus); 0: not known
  double load = -1;  // the 1-minute load average (/proc/loadavg) when the report is made; -1: not known
  CpuFeatures cpu;   // its flags (cpu_features.h)
};

// This machine's. An XLAUNCH_CPUINFO_FILE that cannot be read leaves `cpu` not known, with a
// warning on stderr (the job has run by the time the report is made).
HostFacts this_host_facts();

}  // namespace xlaunch::launcher
