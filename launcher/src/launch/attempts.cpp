#include "launch/attempts.h"

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>

#include "launch/elastic.h"
#include "launch/job.h"
#include "launch/job_outcome.h"
#include "launch/launch_error.h"
#include "launch/startup.h"
#include "xlaunch/preemption.h"
#include "xlaunch/status/private_files.h"
#include "xlaunch/status/status_dir.h"

namespace xlaunch::launcher {
namespace {

// A new directory of this user's, mode 0700, with a random part in its name (docs/security.md):
// another user can neither predict it nor plant files in it.
std::string make_status_dir(const config::LaunchConfig& c, const std::string& run_id, int attempt) {
  std::string why;
  const std::string dir = files::make_private_dir(status_base(c), status_prefix(run_id, attempt), &why);
  if (dir.empty())
    throw LaunchError("cannot make the job's status directory: " + why +
                      (c.log_dir.empty() ? "; set TMPDIR to a directory of your own"
                                         : "; choose a log_dir of your own (--log_dir)"));
  return dir;
}

// preempt_signal as the config spells it ("SIGTERM", "SIGUSR1": validated) to its number.
int signal_number(const std::string& name) { return name == "SIGUSR1" ? SIGUSR1 : SIGTERM; }

// A job of several machines failed: each machine is asked to run `true` through the agent Open MPI
// reaches it with (the elastic probe, bounded by kLinkProbeTimeoutS). One that does not answer
// (its link is down, or it is gone) joins run.daemon_hosts, the machines the outcome names as
// unreachable. The ranks' statuses cannot tell it where the status directory outlived the network
// (a shared file system on another network, or the simulated machines' common disk): a rank there
// may have ended, and said so, by its own watchdog. Only while another machine answers: where
// none does, the probe itself may be what fails (an agent that needs a terminal, say), and naming
// every machine would mislead. Returns whether any was added.
bool add_unanswering_machines(const config::LaunchConfig& c, const std::vector<std::string>& rank_hosts, JobRun& ran) {
  const std::vector<std::string> machines = machines_of(rank_hosts);
  if (machines.size() < 2) return false;
  const char* env_agent = std::getenv("OMPI_MCA_plm_rsh_agent");
  const std::vector<HostAnswer> answers =
      probe_hosts(rsh_agent_argv(c.mpi.extra_args, env_agent ? env_agent : ""), machines, kLinkProbeTimeoutS);
  if (std::none_of(answers.begin(), answers.end(), [](const HostAnswer& a) { return a.answered; })) return false;
  bool added = false;
  for (const HostAnswer& a : answers) {
    if (a.answered || std::find(ran.daemon_hosts.begin(), ran.daemon_hosts.end(), a.host) != ran.daemon_hosts.end())
      continue;
    ran.daemon_hosts.push_back(a.host);
    added = true;
  }
  return added;
}

}  // namespace

std::string make_run_id() {
  char buf[32];
  const std::time_t t = std::time(nullptr);
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", std::gmtime(&t));
  return std::string(buf) + "-" + std::to_string(getpid());
}

std::string status_base(const config::LaunchConfig& c) { return !c.log_dir.empty() ? c.log_dir : status::temp_dir(); }

std::string status_prefix(const std::string& run_id, int attempt) {
  return "xlaunch-status-" + run_id + "-" + std::to_string(attempt) + "-";
}

void print_plan(FILE* out, const LaunchPlan& plan) {
  for (const auto& [name, value] : plan.env)
    std::fprintf(out, "export %s\n", shell_join({name + "=" + value}).c_str());
  std::fprintf(out, "%s\n", shell_join(plan.argv).c_str());
}

int run_attempts(const config::LaunchConfig& job, Environment env, const AttemptsOptions& o,
                 AttemptObserver& observer) {
  const std::vector<std::string>& command = o.command;
  const std::string& resume = o.resume;
  const std::vector<std::string> train_args(command.begin() + 1, command.end());
  std::unique_ptr<ElasticMachines> elastic = config::is_elastic(job) ? std::make_unique<ElasticMachines>(job) : nullptr;
  int last_exit = 1;  // an elastic job that cannot even start: 1
  HelloListener hello;  // the ranks' first signs of life, for every attempt's start-up deadline
  env.hello_port = hello.port();
  for (int attempt = 0;; ++attempt) {
    std::vector<std::string> hosts;
    if (elastic) {
      hosts = elastic->choose(attempt);
      if (hosts.empty()) {
        std::fprintf(stderr, "xlaunch: exit code %d\n", last_exit);
        return last_exit;
      }
    }
    const config::LaunchConfig c = elastic ? attempt_config(job, hosts) : job;
    env.restart_count = attempt;
    env.resume = attempt_resume(resume, c.project_dir, attempt);
    env.status_dir = make_status_dir(c, env.run_id, attempt);
    const LaunchPlan plan = make_launch_plan(c, env, command[0], train_args);
    if (o.verbose) {
      std::fprintf(stderr, "xlaunch: Open MPI %s; launching:\n", o.mpi_version.c_str());
      print_plan(stderr, plan);
    }
    observer.started(c, env.status_dir);
    const JobWatch watch{env.status_dir, c.num_processes, rank_hosts(c),
                         startup_deadline_s(c.startup_timeout_s, c.timeout_s), &hello};
    // The status directory goes when this attempt is over (also by an exception), once what failed
    // has been read from it.
    const struct RemoveAtEnd {
      std::string dir;
      ~RemoveAtEnd() { files::remove_private_dir(dir); }
    } remove_at_end{env.status_dir};
    JobRun ran = run_plan(plan, watch, Preemption{signal_number(c.preempt_signal), c.preempt_timeout_s});
    observer.ended();
    JobOutcome outcome = job_outcome(ran, watch);
    if (outcome.exit_code != 0 && !ran.stop_signal && !ran.preempt_signal && !outcome.preempted &&
        add_unanswering_machines(c, watch.rank_hosts, ran))
      outcome = job_outcome(ran, watch);
    if (outcome.exit_code == 0) return 0;
    // Preempted: restarted only when the preemption came to the ranks alone (a scheduler signalling
    // them): one that came through `xlaunch run` preempts it too.
    const bool restart_preempted = !ran.preempt_signal && !ran.stop_signal && attempt < c.max_restarts;
    if (outcome.preempted && !restart_preempted) {
      std::fprintf(stderr, "xlaunch: preempted: every rank saved its checkpoint and stopped; continue with "
                           "`xlaunch run --resume ...`\n");
      std::fprintf(stderr, "xlaunch: exit code %d\n", kPreemptedExitCode);
      return kPreemptedExitCode;
    }
    const int sig = ran.stop_signal ? ran.stop_signal : ran.preempt_signal;
    if (sig && !outcome.preempted) {
      // Whatever the ranks died of, the job ended because the user (or a scheduler) stopped it: the
      // shell's convention, 128 + the signal (130 for Ctrl-C), and no restart.
      std::fprintf(stderr, "xlaunch: stopped by signal %d (SIG%s), forwarded to the job; %s\n", sig, sigabbrev_np(sig),
                   outcome.message.c_str());
      observer.failed(env.run_id, attempt);  // a job stopped because it seemed stuck: where was each rank?
      std::fprintf(stderr, "xlaunch: exit code %d\n", 128 + sig);
      return 128 + sig;
    }
    std::fprintf(stderr, "xlaunch: %s: %s\n", outcome.preempted ? "the ranks were preempted" : "job failed",
                 outcome.message.c_str());
    if (!outcome.preempted) observer.failed(env.run_id, attempt);
    last_exit = outcome.exit_code;
    if (attempt >= c.max_restarts) {
      const std::string from = outcome.rank >= 0 ? ", from rank " + std::to_string(outcome.rank) : "";
      std::fprintf(stderr, "xlaunch: exit code %d%s\n", outcome.exit_code, from.c_str());
      return outcome.exit_code;
    }
    if (elastic && !outcome.preempted) elastic->blame(hosts, outcome.rank);
    const std::string next_resume = attempt_resume(resume, c.project_dir, attempt + 1);
    const std::string from = next_resume.empty()                ? ""
                             : next_resume == kResumeLatest ? ", from the newest checkpoint in " + c.project_dir
                                                            : ", from " + next_resume;
    std::fprintf(stderr, "xlaunch: restarting the job (restart %d of %d%s)\n", attempt + 1, c.max_restarts,
                 from.c_str());
  }
}

}  // namespace xlaunch::launcher
