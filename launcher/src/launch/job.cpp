#include "launch/job.h"

#include <signal.h>

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

}  // namespace

JobRun run_plan(const LaunchPlan& plan, const JobWatch& watch) {
  JobRun run;
  Teardown teardown;
  std::string why;  // the first failure seen
  pid_t group = 0;  // mpirun's process group, once the launcher has had to end it
  SpawnOptions o;
  o.forwarded = {SIGINT, SIGTERM, SIGHUP};
  // mpirun leads its own process group, so that it and the agents it started here can be ended
  // together; a Ctrl-C at the terminal reaches only our group, so every signal is forwarded (once:
  // a second SIGINT would make mpirun kill the job without letting the ranks clean up).
  o.own_process_group = true;
  o.forward_kernel_signals = true;
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
        group = mpirun;
        run.daemon_hosts = hosts_named(child_cmdlines(mpirun), watch.rank_hosts);
        std::string waits;
        for (const auto& h : run.daemon_hosts) waits += (waits.empty() ? ": it still waits for the Open MPI daemon on " : ", ") + h;
        std::fprintf(stderr,
                     "xlaunch: the job failed (%s) and mpirun has not ended within %d s%s; ending mpirun "
                     "(SIGTERM to its process group)\n",
                     why.c_str(), kMpirunGraceS, waits.c_str());
        kill(-mpirun, SIGTERM);
        return;
      }
      case Teardown::Action::kKill:
        std::fprintf(stderr, "xlaunch: mpirun did not end within %d s of SIGTERM; SIGKILL to its process group\n",
                     kMpirunTermS);
        kill(-mpirun, SIGKILL);
        return;
    }
  };
  run.wait_status = spawn_and_wait(plan.argv, o);
  run.failed_ns = teardown.failed_since_ns();
  // What mpirun left in its group (an agent that ignored SIGTERM) goes with it.
  if (group > 0) kill(-group, SIGKILL);
  return run;
}

}  // namespace xlaunch::launcher
