// A torch-free stand-in for a training binary, for the tests of how a job stops (stop_test.cpp).
//   stop_rank --dir D [--on_usr1 save|ignore|default] [--done_after_restart] [--helper]
// Writes D/pid-R ("PID PPID": the rank and its wrapper), prints "rank R resume=X restart=N ready",
// then sleeps in short steps until a signal ends it. --on_usr1 save: SIGUSR1 is the preemption
// request (xlaunch/preemption.h): it writes D/saved-R and exits kPreemptedExitCode. ignore: SIGUSR1
// is ignored. default: SIGUSR1 kills it. SIGINT and SIGTERM keep their default action throughout.
// --done_after_restart: exits 0 at once when XLAUNCH_RESTART_COUNT is not 0. --helper: first
// starts a child process of its own that sleeps in a session of its own (as a daemonized worker
// would: no signal to the rank's process group or the terminal reaches it), its pid in D/helper-R.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "xlaunch/preemption.h"

namespace {

volatile sig_atomic_t g_preempted = 0;

void on_usr1(int) { g_preempted = 1; }

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

bool write_file(const std::string& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return false;
  const bool ok = std::fputs(text.c_str(), f) >= 0;
  return std::fclose(f) == 0 && ok;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir, usr1 = "default";
  bool done_after_restart = false, helper = false;
  for (int i = 1; i < argc; ++i) {
    if (i + 1 < argc && std::strcmp(argv[i], "--dir") == 0) dir = argv[++i];
    else if (i + 1 < argc && std::strcmp(argv[i], "--on_usr1") == 0) usr1 = argv[++i];
    else if (std::strcmp(argv[i], "--done_after_restart") == 0) done_after_restart = true;
    else if (std::strcmp(argv[i], "--helper") == 0) helper = true;
  }
  if (dir.empty()) {
    std::fprintf(stderr, "usage: stop_rank --dir D [--on_usr1 save|ignore|default] [--done_after_restart]\n");
    return 2;
  }
  const std::string rank = env("OMPI_COMM_WORLD_RANK").empty() ? "0" : env("OMPI_COMM_WORLD_RANK");
  const std::string restart = env("XLAUNCH_RESTART_COUNT");
  if (usr1 == "save") signal(xlaunch::kPreemptionSignal, on_usr1);
  if (usr1 == "ignore") signal(xlaunch::kPreemptionSignal, SIG_IGN);
  std::printf("rank %s resume=%s restart=%s ready\n", rank.c_str(), env("XLAUNCH_RESUME").c_str(), restart.c_str());
  std::fflush(stdout);
  if (done_after_restart && !restart.empty() && restart != "0") return 0;
  if (helper) {
    const pid_t child = fork();
    if (child == 0) {
      setsid();  // out of the rank's process group and session: neither Open MPI nor a Ctrl-C reaches it
      for (;;) pause();
    }
    if (child < 0 || !write_file(dir + "/helper-" + rank, std::to_string(child) + "\n")) return 5;
  }
  const std::string pids = std::to_string(getpid()) + " " + std::to_string(getppid()) + "\n";
  if (!write_file(dir + "/pid-" + rank, pids)) {
    std::perror(("stop_rank: " + dir + "/pid-" + rank).c_str());
    return 3;
  }
  // Sleeps in short steps: a signal's handler (or its default action) decides when it ends.
  while (!g_preempted) usleep(20000);
  // Preempted: the checkpoint is "saved", then the exit code says so.
  if (!write_file(dir + "/saved-" + rank, "saved\n")) return 4;
  std::printf("rank %s saved and stops\n", rank.c_str());
  std::fflush(stdout);
  return xlaunch::kPreemptedExitCode;
}
