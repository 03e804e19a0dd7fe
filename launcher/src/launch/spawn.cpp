#include "launch/spawn.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>

#include "launch/launch_error.h"

extern char** environ;

namespace xlaunch::launcher {

namespace {

volatile sig_atomic_t g_child = 0;
volatile sig_atomic_t g_signal = 0;
volatile sig_atomic_t g_forward_kernel_signals = 1;
volatile sig_atomic_t g_preempt_signal = 0, g_preempted = 0;

// The signal to pass on for `sig` (0: none), recording it: a first preemption is only recorded
// (the watcher passes it on where it is caught), a second becomes SIGTERM (which ends the job);
// any other signal is itself.
int passed_on(int sig) {
  if (sig != g_preempt_signal) {
    g_signal = sig;
    return sig;
  }
  if (!g_preempted) {
    g_preempted = sig;
    return 0;
  }
  g_signal = sig;
  return SIGTERM;
}

void forward(int sig, siginfo_t* info, void*) {
  const int out = passed_on(sig);
  const bool from_kernel = info && info->si_code == SI_KERNEL;
  if (out && g_child > 0 && (g_forward_kernel_signals || !from_kernel)) kill(g_child, out);
}

void set_handlers(const std::vector<int>& signals, const struct sigaction& sa, std::vector<struct sigaction>* old) {
  if (old) old->resize(signals.size());
  for (size_t i = 0; i < signals.size(); ++i) sigaction(signals[i], &sa, old ? &(*old)[i] : nullptr);
}

void restore(const std::vector<int>& signals, const std::vector<struct sigaction>& old) {
  for (size_t i = 0; i < signals.size(); ++i) sigaction(signals[i], &old[i], nullptr);
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// In the child, between fork and exec: only what is safe there, then exec, or exit 127.
[[noreturn]] void become(const SpawnOptions& o, pid_t parent, char** argv, char** envp, const sigset_t& mask) {
  sigprocmask(SIG_SETMASK, &mask, nullptr);  // the parent's, before it blocked SIGCHLD to wait
  if (o.own_process_group) setpgid(0, 0);
  if (o.die_with_parent) {
    // If the parent is killed (mpirun's SIGKILL to the wrapper after a grace period), the child
    // must not live on as an orphan holding its GPU. The parent may have died before prctl.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(128 + SIGKILL);
  }
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  set_handlers(o.forwarded, dfl, nullptr);
  if (o.search_path) {
    execvpe(argv[0], argv, envp);
  } else {
    execve(argv[0], argv, envp);
  }
  std::fprintf(stderr, "%s: cannot start %s: %s\n", o.who.c_str(), argv[0], std::strerror(errno));
  _exit(127);
}

}  // namespace

std::vector<std::string> merged_environment(const char* const* base, const EnvList& extra) {
  std::map<std::string, std::string> vars;
  for (const char* const* e = base; *e; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) vars[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : extra) vars[k] = v;
  std::vector<std::string> out;
  for (const auto& [k, v] : vars) out.push_back(k + "=" + v);
  return out;
}

int last_forwarded_signal() { return g_signal; }

int preempt_received() { return g_preempted; }

int spawn_and_wait(const std::vector<std::string>& argv, const SpawnOptions& o) {
  std::vector<std::string> args = argv;
  std::vector<std::string> env = o.env.empty() ? std::vector<std::string>{} : merged_environment(environ, o.env);
  std::vector<char*> argp = pointers(args);
  std::vector<char*> envp = pointers(env);

  struct sigaction sa {};
  sa.sa_sigaction = forward;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  std::vector<struct sigaction> old;
  g_forward_kernel_signals = o.forward_kernel_signals;
  g_signal = 0;
  g_preempted = 0;
  g_preempt_signal = o.preempt_signal;
  set_handlers(o.forwarded, sa, &old);

  // With a watcher, the wait is sigtimedwait on SIGCHLD, blocked from before fork so that the
  // child's end is never missed nor noticed late (a sleep between two waitpid calls would be).
  // The signals this relies on must get through. A process can inherit them blocked (the mask
  // survives exec: some job runners and container shells start everything so), and then neither
  // would this forward a preemption nor would mpirun, started with the same mask, pass it on: the
  // ranks would never hear of it. So they are unblocked here, and the child starts with them
  // unblocked; whatever else was blocked stays so.
  sigset_t needed;
  sigemptyset(&needed);
  for (int sig : o.forwarded) sigaddset(&needed, sig);
  if (o.preempt_as > 0) sigaddset(&needed, o.preempt_as);
  sigprocmask(SIG_UNBLOCK, &needed, nullptr);
  sigset_t chld, mask;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_SETMASK, nullptr, &mask);  // as it is, with those unblocked: the child's
  sigdelset(&mask, SIGCHLD);
  if (o.watch) sigprocmask(SIG_BLOCK, &chld, nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    sigprocmask(SIG_SETMASK, &mask, nullptr);
    restore(o.forwarded, old);
    throw LaunchError("cannot start " + argv[0] + ": fork: " + std::strerror(err));
  }
  if (pid == 0) become(o, parent, argp.data(), o.env.empty() ? environ : envp.data(), mask);
  if (o.own_process_group) setpgid(pid, pid);  // also here: kill(-pid) must work as soon as we return
  g_child = pid;
  // Arrived before the child existed.
  if (g_signal) kill(pid, g_signal == g_preempt_signal ? SIGTERM : g_signal);

  int status = 0;
  if (!o.watch) {
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  } else {
    const timespec interval{o.watch_interval_ms / 1000, (o.watch_interval_ms % 1000) * 1000000L};
    for (;;) {
      const pid_t got = waitpid(pid, &status, WNOHANG);
      if (got == pid || (got < 0 && errno != EINTR)) break;
      o.watch(pid);
      sigtimedwait(&chld, nullptr, &interval);  // SIGCHLD (or a forwarded signal) ends it early
    }
    sigprocmask(SIG_SETMASK, &mask, nullptr);
  }
  g_child = 0;
  if (o.restore_handlers) restore(o.forwarded, old);
  return status;
}

}  // namespace xlaunch::launcher
