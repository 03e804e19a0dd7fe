#include "job.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "launch_error.h"

extern char** environ;

namespace xlaunch::launcher {

namespace {

volatile sig_atomic_t g_job = 0;
volatile sig_atomic_t g_signal = 0;
constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP};

// A Ctrl-C at the terminal reaches mpirun directly (it is in our process group), and is sent by
// the kernel (SI_KERNEL); forwarding it as well would count as a second Ctrl-C, which makes mpirun
// kill the job without letting the ranks clean up. Signals from kill(1) and friends are forwarded.
void forward(int sig, siginfo_t* info, void*) {
  g_signal = sig;
  if (g_job > 0 && !(info && info->si_code == SI_KERNEL)) kill(g_job, sig);
}

std::vector<std::string> merged_environment(const EnvList& extra) {
  std::map<std::string, std::string> vars;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) vars[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : extra) vars[k] = v;
  std::vector<std::string> out;
  for (const auto& [k, v] : vars) out.push_back(k + "=" + v);
  return out;
}

}  // namespace

int last_forwarded_signal() { return g_signal; }

int run_plan(const LaunchPlan& plan) {
  std::vector<std::string> env = merged_environment(plan.env);
  std::vector<char*> envp, argv;
  for (auto& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = plan.argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);

  struct sigaction sa {}, old[3];
  sa.sa_sigaction = forward;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < 3; ++i) sigaction(kForwarded[i], &sa, &old[i]);

  g_signal = 0;
  const pid_t pid = fork();
  if (pid < 0) throw LaunchError(std::string("cannot start mpirun: fork: ") + std::strerror(errno));
  if (pid == 0) {
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig : kForwarded) sigaction(sig, &dfl, nullptr);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  g_job = pid;
  if (g_signal) kill(pid, g_signal);  // arrived before mpirun existed

  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  g_job = 0;
  for (int i = 0; i < 3; ++i) sigaction(kForwarded[i], &old[i], nullptr);
  return status;
}

}  // namespace xlaunch::launcher
