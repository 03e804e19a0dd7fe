#include "launch/agent.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "xlaunch/env_vars.h"
#include "xlaunch/status/rank_status.h"

namespace xlaunch::launcher {

namespace {

volatile sig_atomic_t g_agent = 0;  // the agent's pid, for the forwarding handler

void forward(int sig) {
  const int saved = errno;
  if (g_agent > 0) kill(static_cast<pid_t>(g_agent), sig);
  errno = saved;
}

// ssh's options that take a value (and -o X=Y), as Open MPI may pass them.
bool takes_value(const std::string& opt) {
  return opt.size() == 2 && std::strchr("bcDEeFIiJLlmOopQRSWw", opt[1]) != nullptr;
}

}  // namespace

std::string agent_host(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].empty()) continue;
    if (args[i][0] != '-') return args[i];
    if (takes_value(args[i])) ++i;
  }
  return "";
}

int agent_wrapper_main(int argc, char** argv) {
  const int n = argc > 2 ? std::atoi(argv[2]) : 0;
  if (n < 1 || 3 + n > argc) {
    std::fprintf(stderr, "xlaunch __agent: usage: xlaunch __agent N AGENT_WORD_1..N ARGS... (set by xlaunch run as "
                         "Open MPI's plm_rsh_agent)\n");
    return 255;
  }
  std::vector<std::string> args(argv + 3, argv + argc);
  const std::string host = agent_host({argv + 3 + n, argv + argc});
  int pipe_fd[2];
  if (pipe2(pipe_fd, O_CLOEXEC) != 0) {
    std::perror("xlaunch __agent: pipe");
    return 255;
  }
  // The signals to pass on are blocked from before the fork until the agent's pid is known here (and
  // its own handlers are the defaults there), so that none is lost in between.
  sigset_t passed, before;
  sigemptyset(&passed);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&passed, sig);
  sigprocmask(SIG_BLOCK, &passed, &before);
  struct sigaction sa {};
  sa.sa_handler = forward;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
  std::vector<char*> cargv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  const pid_t child = fork();
  if (child < 0) {
    std::perror("xlaunch __agent: fork");
    return 255;
  }
  if (child == 0) {
    dup2(pipe_fd[1], STDERR_FILENO);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &dfl, nullptr);
    sigprocmask(SIG_SETMASK, &before, nullptr);
    execvp(cargv[0], cargv.data());
    const char* what = "xlaunch __agent: cannot run the agent: ";
    const char* err = std::strerror(errno);
    (void)!write(STDERR_FILENO, what, std::strlen(what));
    (void)!write(STDERR_FILENO, err, std::strlen(err));
    (void)!write(STDERR_FILENO, "\n", 1);
    _exit(127);
  }
  g_agent = child;
  sigprocmask(SIG_SETMASK, &before, nullptr);
  close(pipe_fd[1]);
  std::string said;
  int status = 0;
  bool ended = false;
  int64_t drain_until = 0;  // once the agent has ended: what it left in the pipe, for at most 1 s
  for (;;) {
    if (!ended) {
      const pid_t got = waitpid(child, &status, WNOHANG);
      if (got == child) {
        g_agent = 0;  // reaped: its pid may be another process's soon
        ended = true;
        drain_until = status::realtime_ns() + 1000000000;
      }
    }
    if (ended && status::realtime_ns() >= drain_until) break;
    pollfd p{pipe_fd[0], POLLIN, 0};
    if (poll(&p, 1, 200) <= 0) continue;
    char buf[4096];
    const ssize_t got = read(pipe_fd[0], buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;  // every writer is gone (the agent's end is waited for below)
    for (ssize_t off = 0; off < got;) {  // passed on as it comes
      const ssize_t w = write(STDERR_FILENO, buf + off, static_cast<size_t>(got - off));
      if (w <= 0 && errno != EINTR) break;
      if (w > 0) off += w;
    }
    said.append(buf, static_cast<size_t>(got));
    if (said.size() > 4 * status::kAgentSaidBytes) said.erase(0, said.size() - 2 * status::kAgentSaidBytes);
  }
  close(pipe_fd[0]);
  while (!ended) {
    const pid_t got = waitpid(child, &status, 0);
    if (got == child || (got < 0 && errno != EINTR)) ended = true;
  }
  g_agent = 0;
  const int code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
  const char* dir = std::getenv(env::kStatusDir.name);
  std::string why;
  // Only where the directory is: on the launching machine (a daemon that starts the next ones, in
  // Open MPI's tree spawn, runs this on its own machine too).
  if (dir && *dir && access(dir, F_OK) == 0 && !host.empty())
    status::write_agent_report(dir, {host, code, status::realtime_ns(), said}, &why);
  return code;
}

}  // namespace xlaunch::launcher
