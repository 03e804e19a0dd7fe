#include "launch/job.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>

#include "xlaunch/status/rank_status.h"
#include "xlaunch/status/verdict.h"

namespace xlaunch::launcher {

namespace {

int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// What the status directory says has gone wrong ("" while nothing has): the verdict, or the first
// rank that ended with a failure. A rank stopped by SIGTERM was stopped by mpirun: a consequence.
std::string failure(const std::string& status_dir) {
  if (status::read_verdict(status_dir)) return "the watchdog's verdict";
  for (const auto& s : status::read_rank_statuses(status_dir))
    if ((s.signaled && s.code != SIGTERM) || (!s.signaled && s.code != 0))
      return "rank " + std::to_string(s.rank) + " " + describe(s);
  return "";
}

// True when this process reads a terminal in its foreground: a user at the keyboard, whose input
// goes to rank 0 through mpirun and whose Ctrl-C reaches our whole process group.
bool interactive() { return isatty(STDIN_FILENO) && tcgetpgrp(STDIN_FILENO) == getpgrp(); }

// `sig` to mpirun and what it started here: its process group when it leads one, else mpirun and
// each of its descendants (the ssh or rsh agents, the local ranks' wrappers).
void signal_mpirun(pid_t mpirun, bool own_group, int sig) {
  if (own_group) {
    kill(-mpirun, sig);
    return;
  }
  const std::vector<pid_t> tree = descendants(mpirun);
  kill(mpirun, sig);
  for (const pid_t p : tree) kill(p, sig);
}

}  // namespace

JobRun run_plan(const LaunchPlan& plan, const JobWatch& watch) {
  JobRun run;
  Teardown teardown;
  std::string why;  // the first failure seen
  pid_t ended = 0;  // mpirun, once the launcher has had to end it
  SpawnOptions o;
  o.forwarded = {SIGINT, SIGTERM, SIGHUP};
  // Run from a script or a scheduler, mpirun leads its own process group, so that it and the agents
  // it started here end together; every signal is forwarded to it, once (a second SIGINT would make
  // mpirun kill the job without letting the ranks clean up). At a terminal it stays in ours: a
  // background group could not read the terminal (SIGTTIN would stop mpirun on the user's input
  // for rank 0), and the Ctrl-C the terminal sends our group reaches it directly, so only signals
  // from kill(1) and friends are forwarded. Ending it then goes to it and its descendants.
  const bool own_group = !interactive();
  o.own_process_group = own_group;
  o.forward_kernel_signals = own_group;
  o.env = plan.env;
  // Outside our process group, mpirun would survive a SIGKILL to it (kill -9 on the group): it dies
  // with us instead, and its daemons see it gone.
  o.die_with_parent = true;
  o.watch_interval_ms = 500;  // a few file reads in the status directory each time
  o.watch = [&](pid_t mpirun) {
    if (why.empty()) why = failure(watch.status_dir);
    switch (teardown.step(now_ns(), !why.empty())) {
      case Teardown::Action::kWait:
        return;
      case Teardown::Action::kTerminate: {
        run.ended_by_launcher = true;
        ended = mpirun;
        run.daemon_hosts = hosts_named(child_cmdlines(mpirun), watch.rank_hosts);
        std::string waits;
        for (const auto& h : run.daemon_hosts) waits += (waits.empty() ? ": it still waits for the Open MPI daemon on " : ", ") + h;
        std::fprintf(stderr,
                     "xlaunch: the job failed (%s) and mpirun has not ended within %d s%s; ending mpirun "
                     "(SIGTERM to it and what it started here)\n",
                     why.c_str(), kMpirunGraceS, waits.c_str());
        signal_mpirun(mpirun, own_group, SIGTERM);
        return;
      }
      case Teardown::Action::kKill:
        std::fprintf(stderr, "xlaunch: mpirun did not end within %d s of SIGTERM; SIGKILL to it and what it started here\n",
                     kMpirunTermS);
        signal_mpirun(mpirun, own_group, SIGKILL);
        return;
    }
  };
  run.wait_status = spawn_and_wait(plan.argv, o);
  run.failed_ns = teardown.failed_since_ns();
  // What mpirun left in its group (an agent that ignored SIGTERM) goes with it. (Not in ours: its
  // descendants had their SIGKILL, and our group is this process too.)
  if (ended > 0 && own_group) kill(-ended, SIGKILL);
  return run;
}

}  // namespace xlaunch::launcher
