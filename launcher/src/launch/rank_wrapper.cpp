#include "launch/rank_wrapper.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "launch/launch_error.h"
#include "launch/spawn.h"
#include "xlaunch/env_vars.h"
#include "xlaunch/status/rank_status.h"

namespace xlaunch::launcher {

namespace {

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

// The lifeline: the wrapper's parent is Open MPI's daemon on this machine (or mpirun on the first).
// When it is gone (killed, or it gave up on a launcher it lost), nobody will end this rank: the
// wrapper ends it, SIGTERM then, kLifelineKillS later, SIGKILL. The training process itself dies
// with the wrapper (die_with_parent).
constexpr int kLifelineKillS = 2;

struct Lifeline {
  pid_t parent = getppid();
  int64_t orphaned_ns = 0;
  bool killed = false;

  void operator()(pid_t child) {
    if (getppid() == parent || killed) return;
    if (orphaned_ns == 0) {
      orphaned_ns = now_ns();
      std::fprintf(stderr, "xlaunch __rank: rank %d: its Open MPI daemon (pid %d) is gone; ending the rank\n",
                   rank_from_env([](const char* name) { return std::getenv(name); }), static_cast<int>(parent));
      kill(child, SIGTERM);
    } else if (now_ns() - orphaned_ns >= kLifelineKillS * 1000000000LL) {
      killed = true;
      kill(child, SIGKILL);
    }
  }
};

SpawnOptions rank_spawn_options() {
  SpawnOptions o;
  o.watch = Lifeline{};
  o.watch_interval_ms = 500;
  o.forwarded = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
  o.search_path = true;
  o.die_with_parent = true;
  o.restore_handlers = false;
  o.who = "xlaunch __rank";
  return o;
}

}  // namespace

int rank_from_env(const GetEnv& getenv) {
  try {
    return place_from_env(getenv).rank;
  } catch (const UsageError&) {
    return 0;
  }
}

int rank_wrapper_main(int argc, char** argv) {
  std::string status_dir;
  int i = 2;
  for (; i < argc && std::strcmp(argv[i], "--") != 0; ++i)
    if (std::strcmp(argv[i], "--status_dir") == 0 && i + 1 < argc) status_dir = argv[++i];
  if (i + 1 >= argc) {
    std::fprintf(stderr, "xlaunch __rank: usage: xlaunch __rank --status_dir DIR -- train_bin [args...]\n");
    return 2;
  }
  export_cpu_threads();
  int status = 0;
  try {
    status = spawn_and_wait(std::vector<std::string>(argv + i + 1, argv + argc), rank_spawn_options());
  } catch (const LaunchError& e) {
    std::fprintf(stderr, "xlaunch __rank: %s\n", e.what());
    return 1;
  }
  status::RankStatus s;
  s.rank = rank_from_env([](const char* name) { return std::getenv(name); });
  s.signaled = WIFSIGNALED(status);
  s.code = s.signaled ? WTERMSIG(status) : WEXITSTATUS(status);
  s.end_ns = now_ns();
  std::string why;
  // A directory that does not exist here is a machine whose ranks report through mpirun alone (no
  // shared log_dir); one that exists but is not this user's private directory is refused, loudly.
  if (!status_dir.empty() && !status::write_rank_status(status_dir, s, &why) && access(status_dir.c_str(), F_OK) == 0)
    std::fprintf(stderr, "xlaunch __rank: warning: rank %d's exit status is not recorded: %s\n", s.rank, why.c_str());

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
