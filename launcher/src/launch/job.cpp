#include "launch/job.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <set>
#include <string>

#include "launch/startup.h"
#include "xlaunch/preemption.h"
#include "xlaunch/status/rank_status.h"
#include "xlaunch/status/verdict_file.h"

namespace xlaunch::launcher {

namespace {

constexpr int64_t kNsPerS = 1000000000;

// To whom a preemption has been passed on (pass_preemption_on).
struct PreemptionDelivery {
  bool mpirun = false;
  std::set<pid_t> ranks;
};

int64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * kNsPerS + ts.tv_nsec;
}

std::string sig_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? "SIG" + std::string(abbrev) : "signal " + std::to_string(sig);
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

// Reaps every ended child; true when none is left (ECHILD).
bool reap_all() {
  for (;;) {
    const pid_t got = waitpid(-1, nullptr, WNOHANG);
    if (got > 0) continue;
    if (got < 0 && errno == EINTR) continue;
    return got < 0 && errno == ECHILD;
  }
}

// Waits up to seconds for every child to end, reaping them; true when none is left.
bool reap_within(double seconds) {
  const int64_t until = status::realtime_ns() + static_cast<int64_t>(seconds * kNsPerS);
  while (!reap_all()) {
    if (status::realtime_ns() >= until) return false;
    usleep(20000);
  }
  return true;
}

std::string pid_list(const std::vector<pid_t>& pids) {
  std::string s;
  for (const pid_t p : pids) s += (s.empty() ? "" : ", ") + std::to_string(p);
  return s;
}

// The processes of the job that outlived mpirun on this machine (a rank's training process still
// exiting, a wrapper, an agent), reparented to us: kLeftoverGraceS to end by themselves, then
// SIGTERM, then SIGKILL, each reaped; so that when `xlaunch run` returns, none is left.
void end_leftovers() {
  if (reap_within(kLeftoverGraceS)) return;
  std::vector<pid_t> left = descendants(getpid());
  std::fprintf(stderr, "xlaunch: %zu process%s of the job outlived mpirun (pid %s); SIGTERM\n", left.size(),
               left.size() == 1 ? "" : "es", pid_list(left).c_str());
  for (const pid_t p : left) kill(p, SIGTERM);
  if (reap_within(kMpirunTermS)) return;
  left = descendants(getpid());
  std::fprintf(stderr, "xlaunch: still there %d s after SIGTERM (pid %s); SIGKILL\n", kMpirunTermS,
               pid_list(left).c_str());
  for (const pid_t p : left) kill(p, SIGKILL);
  if (reap_within(kMpirunTermS)) return;
  std::fprintf(stderr, "xlaunch: warning: pid %s did not end within %d s of SIGKILL (stuck in the kernel?)\n",
               pid_list(descendants(getpid())).c_str(), kMpirunTermS);
}

// Whether `pid` has a handler for `sig` (its SigCgt in /proc): a process that has none would die of
// it, or (ignored, blocked) never act on it.
bool catches(pid_t pid, int sig) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("SigCgt:", 0) == 0) return (std::stoull(line.substr(7), nullptr, 16) >> (sig - 1)) & 1;
  return false;
}

// Passes a preemption on as kPreemptionSignal, each process once, to those that catch it by now:
// mpirun, which passes it on to every rank (also those of other machines), and, straight, the
// training processes of this machine (the children of the ranks' wrappers). The direct way is
// there because mpirun does not pass it on everywhere (on the GPU machines' runner it never
// reached the ranks); one rank that hears of it is enough, as the ranks agree through the control
// element. A process that does not catch it yet (still starting) is tried again at the next look.
void pass_preemption_on(pid_t mpirun, PreemptionDelivery* d) {
  if (!d->mpirun && catches(mpirun, kPreemptionSignal)) {
    kill(mpirun, kPreemptionSignal);
    d->mpirun = true;
  }
  for (const pid_t wrapper : rank_wrappers_under(mpirun))
    for (const pid_t rank : children(wrapper)) {
      if (d->ranks.count(rank) || !catches(rank, kPreemptionSignal)) continue;
      kill(rank, kPreemptionSignal);
      d->ranks.insert(rank);
    }
}

// Marks seen the ranks that have shown a first sign of life since the last look: a started-<R> file
// in the status directory, or a hello to the listener.
void look_for_starts(const JobWatch& watch, StartupDeadline* startup) {
  std::set<int> ranks;
  if (watch.hello) watch.hello->poll(hello_tag(watch.status_dir), &ranks);
  // A wrapper writes started-<R> before anything else: a rank that has ended has one too.
  for (const auto& s : status::read_rank_starts(watch.status_dir)) ranks.insert(s.rank);
  for (const int r : ranks) startup->seen(r);
}

}  // namespace

JobRun run_plan(const LaunchPlan& plan, const JobWatch& watch, const Preemption& preempt) {
  JobRun run;
  Teardown teardown;
  std::string why;            // the first failure seen
  pid_t ended = 0;            // mpirun, once the launcher has had to end it
  int64_t preempt_ns = 0;     // when the preemption was seen passed on
  PreemptionDelivery preempted;
  bool preempt_over = false;  // preempt.timeout_s has passed since
  // Processes mpirun started that outlive it are reparented to us instead of init, so that we can
  // end them and know them gone (end_leftovers).
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
    std::fprintf(stderr, "xlaunch: warning: prctl(PR_SET_CHILD_SUBREAPER): %s; processes of the job that "
                         "outlive mpirun are not waited for\n", std::strerror(errno));
  SpawnOptions o;
  o.forwarded = {SIGINT, SIGTERM, SIGHUP};
  if (preempt.signal != SIGINT && preempt.signal != SIGTERM && preempt.signal != SIGHUP)
    o.forwarded.push_back(preempt.signal);
  o.preempt_signal = preempt.signal;
  o.preempt_as = kPreemptionSignal;
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
  StartupDeadline startup(watch.startup_deadline_s, watch.num_processes, monotonic_ns());
  o.watch = [&](pid_t mpirun) {
    const int64_t now = status::realtime_ns();
    if (!startup.all_seen()) {
      look_for_starts(watch, &startup);
      if (startup.all_seen() && watch.hello) watch.hello->drop_pending();
      // Only while nothing else has ended the job: a failure or a stop signal says more.
      if (why.empty() && !last_forwarded_signal() && !preempt_ns && startup.expired(monotonic_ns())) {
        run.startup_expired = true;
        const std::string who = never_started_text(startup.missing(), watch.rank_hosts);
        std::fprintf(stderr, "xlaunch: %s showed no sign of life within the start-up deadline (%d s from mpirun's "
                             "start); ending the job\n", who.c_str(), startup.deadline_s());
        why = "start-up deadline: " + who + " never started";
      }
    }
    if (preempt_received()) {
      if (!preempt_ns) {
        preempt_ns = now;
        std::fprintf(stderr, "xlaunch: %s received: asking the ranks to checkpoint and stop (preempt_timeout_s %d: "
                             "then the job is ended)\n", sig_name(preempt.signal).c_str(), preempt.timeout_s);
      }
      pass_preemption_on(mpirun, &preempted);
    }
    if (preempt_ns && !preempt_over && now - preempt_ns >= preempt.timeout_s * kNsPerS) {
      preempt_over = true;
      std::fprintf(stderr, "xlaunch: the ranks have not stopped within preempt_timeout_s %d s of the preemption; "
                           "ending the job (SIGTERM to mpirun)\n", preempt.timeout_s);
      kill(mpirun, SIGTERM);
    }
    if (why.empty()) why = failure(watch.status_dir);
    const int stop = last_forwarded_signal();
    switch (teardown.step(now, !why.empty() || stop != 0 || preempt_over)) {
      case Teardown::Action::kWait:
        return;
      case Teardown::Action::kTerminate: {
        run.ended_by_launcher = true;
        ended = mpirun;
        run.daemon_hosts = hosts_named(child_cmdlines(mpirun), watch.rank_hosts);
        std::string waits;
        for (const auto& h : run.daemon_hosts) waits += (waits.empty() ? ": it still waits for the Open MPI daemon on " : ", ") + h;
        const std::string reason = !why.empty() ? "the job failed (" + why + ")"
                                   : stop       ? "the job was stopped (" + sig_name(stop) + ")"
                                                : "the preemption timed out";
        std::fprintf(stderr, "xlaunch: %s and mpirun has not ended within %d s%s; ending mpirun (SIGTERM to it and "
                             "what it started here)\n", reason.c_str(), kMpirunGraceS, waits.c_str());
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
  if (!startup.all_seen()) look_for_starts(watch, &startup);  // the files of ranks that ended at once
  const std::vector<int> missing = startup.missing();
  for (int r = 0; r < watch.num_processes; ++r)
    if (!std::binary_search(missing.begin(), missing.end(), r)) run.started.push_back(r);
  run.failed_ns = teardown.failed_since_ns();
  run.stop_signal = last_forwarded_signal();
  run.preempt_signal = preempt_received();
  // What mpirun left in its group (an agent that ignored SIGTERM) goes with it. (Not in ours: its
  // descendants had their SIGKILL, and our group is this process too.)
  if (ended > 0 && own_group) kill(-ended, SIGKILL);
  end_leftovers();
  return run;
}

}  // namespace xlaunch::launcher
