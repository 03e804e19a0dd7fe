// The whole job's outcome, from how each rank ended and the watchdog's verdict.
//
// Every rank runs as `xlaunch __rank --status_dir D -- bin args` (rank_wrapper.h), which records
// the training process's exit code or signal in D (xlaunch/status/rank_status.h); a rank whose
// watchdog gave up leaves the verdict there (xlaunch/status/verdict_file.h). After mpirun returns, the
// launcher reads D and summarize_job() names the rank that failed first: mpirun then kills the
// others, so later failures are consequences, not causes.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "xlaunch/status/rank_status.h"
#include "xlaunch/status/verdict_file.h"

namespace xlaunch::launcher {

using status::RankStatus;

// "exited with code 3", "was killed by signal 9 (SIGKILL)".
std::string describe(const RankStatus& s);

struct JobOutcome {
  int exit_code = 0;    // what `xlaunch run` returns
  int rank = -1;        // the rank at fault, when one is known
  std::string message;  // empty on success
  // Every rank saved its checkpoint and stopped on a preemption (xlaunch/preemption.h); exit_code
  // is then kPreemptedExitCode.
  bool preempted = false;
};

// Pure. Without a verdict, a job whose every rank reported, at least one exiting with
// kPreemptedExitCode and each of the others the same or stopped by mpirun (SIGTERM: mpirun ends
// the job once the first rank has exited non-zero), was preempted: kPreemptedExitCode, preempted.
// Otherwise: mpirun_wait_status: waitpid's status for mpirun; num_processes: ranks expected.
// A verdict decides (a stuck job: 124; a rank that left early or a mismatch: 1; a rank that failed
// while others waited: its code); else a failed rank decides the exit code (its code, or 128 +
// signal); without one, mpirun's does. When the first failures are every rank of one machine, of
// a job on several, and no rank elsewhere failed the same way, the message names the machine and
// its ranks ("machine sim1 (ranks 2, 3): every rank was killed by signal 9 (SIGKILL)"): a machine
// lost, not a bug in one rank. Ranks that left no status, when every rank that did was stopped by
// mpirun (SIGTERM), are named first: they went with their wrappers (a machine or its daemon lost).
JobOutcome summarize_job(int mpirun_wait_status, const std::vector<RankStatus>& ranks, int num_processes,
                         const std::optional<status::Verdict>& verdict = std::nullopt);

}  // namespace xlaunch::launcher
