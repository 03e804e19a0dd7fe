// Prints where each rank runs and what the runtime decided there, one line per rank:
//   probe rank=R world=W host=H local_rank=L local_main=0|1 bucket_comm=shm|mpi shm=DEV:INO
// for multimachine_test.sh, which checks the lines against the hostfile's layout.
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <string>

#include "xlaunch/accelerator.h"
#include "xlaunch/process_state.h"

int main() {
  xlaunch::AcceleratorOptions o = xlaunch::AcceleratorOptions::from_env();
  o.cpu = true;
  xlaunch::Accelerator acc(o);
  // Collective: the same decision prepare() makes for a model's gradient buckets.
  const std::string comm = acc.bucket_communicator(acc.device())->name();
  char host[HOST_NAME_MAX + 1] = {0};
  gethostname(host, sizeof host - 1);
  struct stat st {};
  stat("/dev/shm", &st);
  std::printf("probe rank=%d world=%d host=%s local_rank=%d local_main=%d bucket_comm=%s shm=%lu:%lu\n",
              acc.process_index(), acc.num_processes(), host, acc.local_process_index(),
              acc.is_local_main_process() ? 1 : 0, comm.c_str(), static_cast<unsigned long>(st.st_dev),
              static_cast<unsigned long>(st.st_ino));
  std::fflush(stdout);
  return 0;
}
