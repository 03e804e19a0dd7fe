// Supervising mpirun while the job runs, so that `xlaunch run` never waits on it without a
// deadline, and naming the machines that could not be reached (docs/failures.md, "When a machine
// goes away").
//
// mpirun ends a job once every Open MPI daemon has reported that its ranks are gone. A daemon on a
// machine whose link is down never reports, and mpirun waits for it for ever. So while mpirun runs
// the launcher watches the status directory: once the job has failed (a verdict exists, or a rank
// ended with a failure), mpirun gets kMpirunGraceS to finish its own cleanup; then its process
// group (mpirun and the ssh or rsh agents it started here) gets SIGTERM, and kMpirunTermS later
// SIGKILL. The machines whose agent was still running then (their daemon never reported), and those
// none of whose ranks left an exit status while other machines' did, are named as unreachable.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "launch/job_outcome.h"
#include "xlaunch/config/launch_config.h"

namespace xlaunch::launcher {

// Seconds mpirun has, once the job has failed, to end the job itself (it normally does in one or
// two: it tells every daemon to end its ranks, and they answer).
inline constexpr int kMpirunGraceS = 4;
// Seconds between SIGTERM to mpirun's process group and SIGKILL.
inline constexpr int kMpirunTermS = 2;

// Pure: the decision, from the time and whether the job has failed by then.
class Teardown {
 public:
  enum class Action { kWait, kTerminate, kKill };
  // Called every poll with CLOCK_REALTIME now. Returns kTerminate once, kMpirunGraceS after the
  // first call that saw failed; kKill once, kMpirunTermS after that; kWait otherwise.
  Action step(int64_t now_ns, bool failed);
  int64_t failed_since_ns() const { return failed_ns_; }  // 0: not failed

 private:
  int64_t failed_ns_ = 0, term_ns_ = 0;
  bool killed_ = false;
};

// Pure: the host names of an Open MPI hostfile, in order ("sim0 slots=2" -> "sim0"); comments (#)
// and blank lines skipped, a host listed twice taken once.
std::vector<std::string> parse_hostfile(const std::string& text);

// Pure: the host of each rank, when the launch plan places ranks by machine (several machines,
// the default mapping ppr:N:node: machine m holds ranks m*N .. m*N+N-1), from the hostfile's text
// (parse_hostfile) or from c.mpi.hosts. Empty when the placement is not known (one machine, an explicit map_by).
std::vector<std::string> rank_hosts(const config::LaunchConfig& c, const std::string& hostfile_text);

// rank_hosts() with the hostfile read from c.mpi.hostfile (an unreadable one: empty).
std::vector<std::string> rank_hosts(const config::LaunchConfig& c);

// Pure: which of `hosts` appear as a whole word in these command lines (mpirun's children here:
// one ssh or rsh agent per machine, `ssh -x sim1 orted ...`), in the order of `hosts`.
std::vector<std::string> hosts_named(const std::vector<std::vector<std::string>>& cmdlines,
                                     const std::vector<std::string>& hosts);

// The command lines of the living children of `parent`, from /proc.
std::vector<std::vector<std::string>> child_cmdlines(pid_t parent);

// Every living descendant of `root` (children, their children, ...), from one look at /proc.
std::vector<pid_t> descendants(pid_t root);

// The living children of `parent`, from /proc.
std::vector<pid_t> children(pid_t parent);

// Those of descendants(root) that are ranks' wrappers (`xlaunch __rank ...`, which pass signals on
// to their training process).
std::vector<pid_t> rank_wrappers_under(pid_t root);

class HelloListener;  // startup.h

struct JobWatch {
  std::string status_dir;
  int num_processes = 1;
  std::vector<std::string> rank_hosts;  // rank_hosts(); empty: unknown
  int startup_deadline_s = 0;           // startup_deadline_s() (startup.h); 0: none
  HelloListener* hello = nullptr;       // where the ranks' hellos arrive; null: only started-<R> files count
};

// How mpirun's run ended, as the launcher saw it.
struct JobRun {
  int wait_status = 0;                    // waitpid's, for mpirun
  bool ended_by_launcher = false;         // mpirun did not finish within the grace and was ended
  int64_t failed_ns = 0;                  // when the launcher first saw the job failed (0: never)
  // Machines whose agent mpirun still waited for when ended, and (a job of several machines that
  // failed) those that did not answer the agent's `true` afterwards: named as unreachable.
  std::vector<std::string> daemon_hosts;
  int stop_signal = 0;     // the last signal that stopped the job (last_forwarded_signal()); 0: none
  int preempt_signal = 0;  // the preempt signal, when `xlaunch run` received it; 0: not
  std::vector<int> started;     // the ranks that showed a first sign of life (startup.h), ascending
  bool startup_expired = false;  // the start-up deadline passed first, and the launcher ended the job
};

struct Unreachable {
  std::string host;
  std::vector<int> ranks;
  int64_t since_ns = 0;  // the last sign of life the launcher knows of (a step's end), else 0
};

// Pure: the machines of rank_hosts, each once, in rank order.
std::vector<std::string> machines_of(const std::vector<std::string>& rank_hosts);

// Pure: the machines that did not report: every machine in daemon_hosts, and, when statuses_shared
// (the job failed, and the status directory is seen from the other machines: a rank on a machine
// other than the launcher's left a status), every machine none of whose ranks did. Needs rank_hosts.
std::vector<Unreachable> unreachable_machines(const std::vector<std::string>& rank_hosts,
                                              const std::vector<RankStatus>& statuses,
                                              const std::vector<std::string>& daemon_hosts, bool statuses_shared);

// Pure: "machine sim1 (rank 1) unreachable since 16:19:41: its link or the machine is down; its
// processes may still run there", one clause per machine joined by "; ". since_ns 0 in a machine
// takes fallback_ns (when the job was seen failing). Times in this machine's local time.
std::string unreachable_text(const std::vector<Unreachable>& machines, int64_t fallback_ns);

// The ranks that never started (run.started), as the outcome's message names them: when the
// start-up deadline passed ("the job did not start within its start-up deadline of 15 s ...:
// machine sim1 (rank 1) ..."), and when the job failed otherwise only where the agent that started
// a machine's daemon (agent.h, its agent-<host> in the status directory) failed or spoke: those
// machines are named as the cause, with what it said. "" when there is nothing to say.
// A job in which a rank started is never said to have a machine that did not (Open MPI starts no
// rank before every daemon has called back). *first_rank (when given): the first rank of the
// machine named as the cause; -1 when none is (no rank, and no machine, is then at fault).
std::string never_started_message(const JobRun& run, const JobWatch& watch, int* first_rank = nullptr);

// The job's outcome (summarize_job) from the status directory and how mpirun ended, with the
// unreachable machines named: first when no verdict or failed rank explains the failure, else after.
// A job ended at its start-up deadline exits 124 and names the ranks, by machine, that never started.
JobOutcome job_outcome(const JobRun& run, const JobWatch& watch);

}  // namespace xlaunch::launcher
