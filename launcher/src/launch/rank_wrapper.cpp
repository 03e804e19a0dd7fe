#include "launch/rank_wrapper.h"

#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "launch/launch_error.h"
#include "launch/lifeline.h"
#include "launch/spawn.h"
#include "launch/startup.h"
#include "xlaunch/env_vars.h"
#include "xlaunch/status/rank_status.h"

namespace xlaunch::launcher {

namespace {

// --num_cpu_threads_per_process reaches the program as OMP_NUM_THREADS, as with Accelerate: it sizes
// LibTorch's intra-op pool in any program, and the runtime leaves a set OMP_NUM_THREADS alone.
void export_cpu_threads() {
  const char* n = std::getenv(env::kNumCpuThreads.name);
  if (n && std::atoi(n) > 0) setenv("OMP_NUM_THREADS", n, 1);
}

// Reads /proc/<pid>/comm: "orted" for Open MPI's daemon.
std::string command_name(pid_t pid) {
  FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/comm").c_str(), "r");
  if (!f) return "";
  char buf[64] = {0};
  const bool ok = std::fgets(buf, sizeof buf, f) != nullptr;
  std::fclose(f);
  std::string s = ok ? buf : "";
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

// XLAUNCH_TIMEOUT_S as the environment contract reads it (env_vars.h: its declared default when
// unset). A bad value is the rank's to report (its runtime refuses it, naming the variable); the
// lifeline takes the declared default meanwhile.
int timeout_s() {
  try {
    return static_cast<int>(env::get_int(env::kTimeoutS));
  } catch (const std::exception&) {
    return static_cast<int>(env::parse_int(env::kTimeoutS, env::kTimeoutS.default_value));
  }
}

// The lifeline (lifeline.h): the wrapper's parent is Open MPI's daemon on this machine (mpirun on
// the launching one). When it is gone, nobody will end this rank; when the launching machine does
// not answer for lost_after_s, this machine is cut off and the daemon waits for ever: either way
// the wrapper ends its rank (SIGTERM, then SIGKILL), and in the second also the daemon.
struct Lifeline {
  pid_t parent = getppid();
  int rank = rank_from_env([](const char* name) { return std::getenv(name); });
  std::vector<std::pair<std::string, int>> launcher = tcp_endpoints(env_get("OMPI_MCA_orte_hnp_uri"));
  bool probes_while_running = env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0) == 0;  // one per machine
  LauncherSilence silence{lost_after_s(timeout_s())};
  int64_t last_probe_ns = 0, ending_ns = 0;
  Answer last_answer = Answer::kAccepted;
  bool daemon_too = false, killed = false;

  static std::string env_get(const char* name) {
    const char* v = std::getenv(name);
    return v ? v : "";
  }

  std::string launcher_text() const {
    return launcher.empty() ? "" : launcher.front().first + ":" + std::to_string(launcher.front().second);
  }

  bool parent_is_daemon() const { return getppid() == parent && command_name(parent) == "orted"; }

  // One check of the launching machine; true once it has been silent for too long.
  bool launcher_lost() {
    if (launcher.empty()) return false;
    const int64_t now = status::realtime_ns();
    last_probe_ns = now;
    last_answer = check_launcher(launcher, kProbeTimeoutMs);
    return silence.lost(now, last_answer);
  }

  // rank_running: the rank is ended too; else only the daemon is.
  void say_lost(bool rank_running) const {
    char silent[96];
    std::snprintf(silent, sizeof silent, "has not answered for %.0f s: this machine is cut off from it",
                  static_cast<double>(status::realtime_ns() - silence.silent_since_ns()) / 1e9);
    const std::string daemon = parent_is_daemon() ? "Open MPI's daemon here (pid " + std::to_string(parent) + ")" : "";
    const std::string ending = !rank_running ? daemon : daemon.empty() ? "this rank" : "this rank and " + daemon;
    std::fprintf(stderr, "xlaunch __rank: rank %d: the launching machine (mpirun at %s) %s; ending %s\n", rank,
                 launcher_text().c_str(), last_answer == Answer::kRefused ? "refuses connections: mpirun is gone" : silent,
                 ending.c_str());
  }

  void operator()(pid_t child) {
    const int64_t now = status::realtime_ns();
    if (ending_ns) {
      if (!killed && now - ending_ns >= kEndGraceS * 1000000000LL) {
        killed = true;
        kill(child, SIGKILL);
        if (daemon_too && parent_is_daemon()) kill(parent, SIGKILL);
      }
      return;
    }
    if (getppid() != parent) {
      std::fprintf(stderr, "xlaunch __rank: rank %d: its Open MPI daemon (pid %d) is gone; ending the rank\n", rank,
                   static_cast<int>(parent));
      ending_ns = now;
      kill(child, SIGTERM);
      return;
    }
    if (!probes_while_running || now - last_probe_ns < kProbeEveryS * 1000000000LL || !launcher_lost()) return;
    say_lost(true);
    ending_ns = status::realtime_ns();
    daemon_too = parent_is_daemon();
    kill(child, SIGTERM);
    if (daemon_too) kill(parent, SIGTERM);
  }

  // After the rank failed, before the wrapper reports it: when the launching machine does not
  // answer, its daemon here would wait for ever to say so; end it once the silence has lasted.
  // (A refusal means mpirun is gone over a working link: the daemon sees its connection close and
  // ends by itself, so the wrapper reports at once and leaves it be.)
  void before_leaving() {
    if (ending_ns || launcher.empty()) return;
    while (!launcher_lost()) {
      if (silence.silent_since_ns() == 0) return;  // it answered
      sleep(kProbeEveryS);
    }
    if (last_answer == Answer::kRefused) return;
    if (!parent_is_daemon()) return;
    say_lost(false);
    kill(parent, SIGTERM);
    for (int i = 0; i < kEndGraceS * 10 && parent_is_daemon(); ++i) usleep(100000);
    if (parent_is_daemon()) kill(parent, SIGKILL);
  }
};

// The rank's first sign of life for the start-up deadline (startup.h): started-<R> in the status
// directory where this machine sees it, and a hello to the launcher (hello_port > 0) from a
// detached thread (tried again for kHelloRetryForS while the launcher does not take it), with
// every signal blocked there (they are the waiting loop's to pass on), so that a launcher that
// does not answer never delays the training program or the wrapper's exit.
void announce_start(const std::string& status_dir, int hello_port) {
  char name[HOST_NAME_MAX + 1] = {0};
  const std::string host = gethostname(name, sizeof name - 1) == 0 && name[0] ? name : "unknown-host";
  const int rank = rank_from_env([](const char* v) { return std::getenv(v); });
  std::string why;
  const bool recorded = !status_dir.empty() && status::write_rank_start(status_dir, {rank, status::realtime_ns(), host}, &why);
  if (!recorded && !status_dir.empty() && access(status_dir.c_str(), F_OK) == 0)
    std::fprintf(stderr, "xlaunch __rank: warning: rank %d's start is not recorded: %s\n", rank, why.c_str());
  if (hello_port <= 0) return;
  const char* uri_env = std::getenv("OMPI_MCA_orte_hnp_uri");
  const std::string uri = uri_env ? uri_env : "";
  const auto hosts = tcp_endpoints(uri);
  sigset_t all, before;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &before);
  try {
    std::thread([=] {
      // Unheard, it matters only where the status directory is not seen (no shared log_dir).
      if (!send_hello(hosts, hello_port, hello_line(hello_tag(status_dir), rank, host), kHelloTimeoutMs,
                      kHelloRetryForS) &&
          !recorded)
        std::fprintf(stderr, "xlaunch __rank: warning: rank %d could not tell the launcher it started (port %d at "
                             "%s); without a shared log_dir, `xlaunch run` may end the job at its start-up deadline "
                             "(startup_timeout_s)\n", rank, hello_port, uri.empty() ? "(no OMPI_MCA_orte_hnp_uri)" : uri.c_str());
    }).detach();
  } catch (const std::system_error& e) {
    std::fprintf(stderr, "xlaunch __rank: warning: no thread for rank %d's hello to the launcher: %s\n", rank, e.what());
  }
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
}

SpawnOptions rank_spawn_options(const std::shared_ptr<Lifeline>& lifeline) {
  SpawnOptions o;
  o.watch = [lifeline](pid_t child) { (*lifeline)(child); };
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
  int hello_port = 0;
  int i = 2;
  for (; i < argc && std::strcmp(argv[i], "--") != 0; ++i) {
    if (std::strcmp(argv[i], "--status_dir") == 0 && i + 1 < argc) status_dir = argv[++i];
    else if (std::strcmp(argv[i], "--hello") == 0 && i + 1 < argc) hello_port = std::atoi(argv[++i]);
  }
  if (i + 1 >= argc) {
    std::fprintf(stderr, "xlaunch __rank: usage: xlaunch __rank --status_dir DIR [--hello PORT] -- train_bin [args...]\n");
    return 2;
  }
  export_cpu_threads();
  int status = 0;
  const auto lifeline = std::make_shared<Lifeline>();
  announce_start(status_dir, hello_port);
  try {
    status = spawn_and_wait(std::vector<std::string>(argv + i + 1, argv + argc), rank_spawn_options(lifeline));
  } catch (const LaunchError& e) {
    std::fprintf(stderr, "xlaunch __rank: %s\n", e.what());
    return 1;
  }
  status::RankStatus s;
  s.rank = rank_from_env([](const char* name) { return std::getenv(name); });
  s.signaled = WIFSIGNALED(status);
  s.code = s.signaled ? WTERMSIG(status) : WEXITSTATUS(status);
  s.end_ns = status::realtime_ns();
  if (s.signaled || s.code != 0) lifeline->before_leaving();
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
