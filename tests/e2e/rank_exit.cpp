// A torch-free stand-in for a training binary, for the end-to-end tests of `xlaunch run`.
//   rank_exit [--fail_rank R] [--code C] [--signal S] [--sleep SECONDS] [other args...]
// Prints "rank R of N pid P args: ..." and "rank R ready"; then the rank named by --fail_rank
// exits with C (or kills itself with signal S), and the others sleep SECONDS (default 0) and exit 0.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

int main(int argc, char** argv) {
  const char* r = std::getenv("OMPI_COMM_WORLD_RANK");
  const char* n = std::getenv("OMPI_COMM_WORLD_SIZE");
  const int rank = r ? std::atoi(r) : 0;
  int fail_rank = -1, code = 1, sig = 0, sleep_s = 0;
  std::string args;
  for (int i = 1; i < argc; ++i) {
    args += std::string(i > 1 ? " " : "") + argv[i];
    if (i + 1 < argc && std::strcmp(argv[i], "--fail_rank") == 0) fail_rank = std::atoi(argv[i + 1]);
    if (i + 1 < argc && std::strcmp(argv[i], "--code") == 0) code = std::atoi(argv[i + 1]);
    if (i + 1 < argc && std::strcmp(argv[i], "--signal") == 0) sig = std::atoi(argv[i + 1]);
    if (i + 1 < argc && std::strcmp(argv[i], "--sleep") == 0) sleep_s = std::atoi(argv[i + 1]);
  }
  std::printf("rank %d of %s pid %d args: %s\n", rank, n ? n : "1", static_cast<int>(getpid()), args.c_str());
  std::printf("rank %d env XLAUNCH_MIXED_PRECISION=%s\n", rank, std::getenv("XLAUNCH_MIXED_PRECISION") ?: "(unset)");
  std::printf("rank %d restart %s\n", rank, std::getenv("XLAUNCH_RESTART_COUNT") ?: "(unset)");
  std::printf("rank %d ready\n", rank);
  std::fflush(stdout);
  if (rank == fail_rank) {
    if (sig) raise(sig);
    return code;
  }
  sleep(static_cast<unsigned>(sleep_s));
  return 0;
}
