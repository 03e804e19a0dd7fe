#include "rank_wrapper.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

#include "rank_status.h"
#include "xlaunch/env_vars.h"

namespace xlaunch::launcher {

namespace {

volatile sig_atomic_t g_child = 0;
constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

void forward(int sig) {
  if (g_child > 0) kill(g_child, sig);
}

// The rank from the launcher's environment: Open MPI, then PMI; 0 when neither is set.
int my_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"})
    if (const char* v = std::getenv(name)) return std::atoi(v);
  return 0;
}

int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// --num_cpu_threads_per_process reaches the program as OMP_NUM_THREADS, as with Accelerate: it sizes
// LibTorch's intra-op pool in any program, and the runtime leaves a set OMP_NUM_THREADS alone.
void export_cpu_threads() {
  const char* n = std::getenv(env::kNumCpuThreads.name);
  if (n && std::atoi(n) > 0) setenv("OMP_NUM_THREADS", n, 1);
}

}  // namespace

int rank_wrapper_main(int argc, char** argv) {
  std::string status_dir;
  int i = 2;
  for (; i < argc && std::strcmp(argv[i], "--") != 0; ++i)
    if (std::strcmp(argv[i], "--status_dir") == 0 && i + 1 < argc) status_dir = argv[++i];
  if (i + 1 >= argc) {
    std::fprintf(stderr, "xlaunch __rank: usage: xlaunch __rank --status_dir DIR -- train_bin [args...]\n");
    return 2;
  }
  char** child_argv = argv + i + 1;

  struct sigaction sa {};
  sa.sa_handler = forward;
  sigemptyset(&sa.sa_mask);
  for (int sig : kForwarded) sigaction(sig, &sa, nullptr);

  export_cpu_threads();
  const pid_t pid = fork();
  if (pid < 0) {
    std::perror("xlaunch __rank: fork");
    return 1;
  }
  if (pid == 0) {
    // If the wrapper is killed (mpirun's SIGKILL after a grace period), the training process must
    // not live on as an orphan holding its GPU.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() == 1) _exit(128 + SIGKILL);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig : kForwarded) sigaction(sig, &dfl, nullptr);
    execvp(child_argv[0], child_argv);
    std::fprintf(stderr, "xlaunch __rank: cannot start %s: %s\n", child_argv[0], std::strerror(errno));
    _exit(127);
  }
  g_child = pid;

  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  RankStatus s;
  s.rank = my_rank();
  s.signaled = WIFSIGNALED(status);
  s.code = s.signaled ? WTERMSIG(status) : WEXITSTATUS(status);
  s.end_ns = now_ns();
  if (!status_dir.empty()) write_rank_status(status_dir, s);

  if (s.signaled) {  // end the same way, so mpirun reports the signal too
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigaction(s.code, &dfl, nullptr);
    raise(s.code);
    return 128 + s.code;
  }
  return s.code;
}

}  // namespace xlaunch::launcher
