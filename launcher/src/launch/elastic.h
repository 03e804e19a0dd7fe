// Elastic jobs (num_machines MIN:MAX, as torchrun's --nnodes MIN:MAX): which machines each attempt
// of `xlaunch run` runs on. See docs/multi-machine.md#elastic-jobs.
//
// Before each attempt every listed machine that is not kept out is asked to run `true` through the
// agent Open MPI starts its daemons with (plm_rsh_agent), all at once, each bounded by
// kHostProbeTimeoutS. The attempt runs on the first MAX (in the order listed) that answered, with
// the per-machine process count fixed, so its world size is machines x processes_per_machine; a
// machine whose rank was at fault in max_machine_failures failed attempts is kept out for good.
// The decisions are pure functions (choose_machines, attempt_config, machine_of_rank); probe_hosts
// is the doing.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "launch/supervise.h"  // parse_hostfile
#include "xlaunch/config/launch_config.h"

namespace xlaunch::launcher {

// Seconds a machine has to run `true` through the rsh agent before it counts as not answering.
inline constexpr double kHostProbeTimeoutS = 10;
// The same after a job of several machines failed, to name the machines that no longer answer
// (attempts.cpp): shorter, since the user waits for the verdict.
inline constexpr double kLinkProbeTimeoutS = 3;

// The machines of the job in order: mpi.hosts, else the hosts of mpi.hostfile (read here). Throws
// LaunchError when the hostfile cannot be read or lists no host.
std::vector<std::string> listed_machines(const config::LaunchConfig& c);

// Pure: the command Open MPI reaches other machines with, as argv before the host name: the
// agent from `--mca plm_rsh_agent X` in extra_args, else from OMPI_MCA_plm_rsh_agent (`env_agent`,
// "" when unset), else ssh (Open MPI's default). Of a list "ssh : rsh" the first word's program is
// taken. ssh gets -o BatchMode=yes, so a password prompt fails at once instead of waiting.
std::vector<std::string> rsh_agent_argv(const std::vector<std::string>& extra_args, const std::string& env_agent);

struct HostAnswer {
  std::string host;
  bool answered = false;
  std::string why;  // when not: "did not answer within 10 s", "exited with code 1: <its last line>"
};

// Runs `agent host true` for every host at once, stdin from /dev/null, each in its own process
// group; waits at most timeout_s in all, then kills the process groups of those still running.
// Hosts that are this machine (localhost, 127.0.0.1, this host name) answer without a probe: mpirun
// starts their ranks itself. Returns one answer per host, in the order given.
std::vector<HostAnswer> probe_hosts(const std::vector<std::string>& agent, const std::vector<std::string>& hosts,
                                    double timeout_s);

struct AttemptMachines {
  std::vector<std::string> hosts;  // the machines of the attempt, in listed order (at most MAX)
  std::vector<std::string> notes;  // one line per machine left out, saying why
};

// Pure. listed: the job's machines in order; answers: probe_hosts' for those not kept out (a
// listed machine without an answer was not asked); failures: failed attempts each machine's rank
// was at fault in. Takes, in order, the machines that answered and have fewer than max_failures
// failures, up to max_machines.
AttemptMachines choose_machines(const std::vector<std::string>& listed, const std::vector<HostAnswer>& answers,
                                const std::map<std::string, int>& failures, int max_failures, int max_machines);

// Pure: the config of one attempt on `hosts`: mpi.hosts = hosts (the hostfile no longer used),
// num_machines = their count (not elastic any more), num_processes = count x processes_per_machine(c).
config::LaunchConfig attempt_config(const config::LaunchConfig& c, const std::vector<std::string>& hosts);

// Pure: the machine rank r of an attempt on `hosts` runs on (ranks fill machines in order,
// processes_per_machine each: --map-by ppr:N:node); "" for a rank outside the job.
std::string machine_of_rank(const std::vector<std::string>& hosts, int per_machine, int rank);

// "sim0, sim1"
std::string join_hosts(const std::vector<std::string>& hosts);

// The first MAX machines listed: an elastic job's first attempt when every machine answers.
std::vector<std::string> first_machines(const config::LaunchConfig& c);

// An elastic job's machines across the attempts of one `xlaunch run`: which were at fault in
// failed attempts. The doing around the pure functions above; prints what it decides.
class ElasticMachines {
 public:
  explicit ElasticMachines(const config::LaunchConfig& c);

  // The machines of the next attempt, after asking each one not kept out whether it answers; prints
  // a line for each machine left out and one for the attempt. Fewer than MIN: prints why, returns {}.
  std::vector<std::string> choose(int attempt);

  // After a failed attempt on `hosts`: counts a failure against the machine of the rank at fault.
  void blame(const std::vector<std::string>& hosts, int rank);

 private:
  const config::LaunchConfig& c_;
  std::vector<std::string> listed_;
  std::vector<std::string> agent_;
  std::map<std::string, int> failures_;
};

}  // namespace xlaunch::launcher
