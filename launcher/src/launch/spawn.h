// Running one child process to its end while passing signals on to it: mpirun under `xlaunch run`
// (job.h), and the training process under `xlaunch __rank` (rank_wrapper.h).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "launch/launch_plan.h"

namespace xlaunch::launcher {

struct SpawnOptions {
  std::vector<int> forwarded;  // signals passed on to the child while it runs
  // A signal of `forwarded` that means "this job is being preempted" (0: none): its first arrival
  // is recorded (preempt_received()) and not passed on: the watcher passes preempt_as on
  // (kPreemptionSignal, xlaunch/preemption.h) to the processes that catch it, since one that does
  // not would die of it (job.cpp). A second one is passed on as SIGTERM, which ends the job.
  int preempt_signal = 0;
  // Kept unblocked here and in the child, as `forwarded` are (a mask inherited with them blocked
  // would keep them from ever arriving).
  int preempt_as = 0;
  // false: a forwarded signal the kernel sent (a Ctrl-C at the terminal, SI_KERNEL) is not passed
  // on, because the child, in our process group, got it directly.
  bool forward_kernel_signals = true;
  EnvList env;  // set over this process's environment for the child; empty: the environment as it is
  bool search_path = false;  // a bare argv[0] is searched in PATH (execvp); else it is a path
  bool die_with_parent = false;  // SIGKILL the child if this process dies first (PR_SET_PDEATHSIG)
  // true: the handlers in place before are put back once the child has ended. false: the
  // forwarding handlers stay, with nothing left to forward to, so a signal that arrives while the
  // caller records how the child ended does not cut that short.
  bool restore_handlers = true;
  std::string who = "xlaunch";  // how messages name this process
  // true: the child leads a process group of its own (setpgid), so that it and everything it
  // started on this machine can be signalled at once (kill(-pid, ...)). Signals the kernel sends to
  // our group (a Ctrl-C) then do not reach it directly: set forward_kernel_signals too.
  bool own_process_group = false;
  // When set, called about every watch_interval_ms with the child's pid while it runs (from the
  // waiting loop, not a signal handler): a watcher that may signal the child. Unset: a plain
  // blocking wait.
  std::function<void(pid_t)> watch;
  int watch_interval_ms = 200;
};

// Starts argv (argv[0] the program) as a child with the forwarding handlers installed, waits for
// it (calling o.watch while it does, when set), and returns waitpid's status. A forwarded signal that arrives before the child exists is
// sent to it as soon as it does. When exec fails the child says why on stderr and exits 127.
// Throws LaunchError when fork fails. Not reentrant: one child at a time per process.
int spawn_and_wait(const std::vector<std::string>& argv, const SpawnOptions& o);

// The last forwarded signal that reached this process while spawn_and_wait ran (0: none), whether
// passed on or not: a job the user interrupted is not restarted. A first preemption is not one
// (the job may yet end by itself, preempted): preempt_received() says it came.
int last_forwarded_signal();

// The preempt_signal, once it has reached this process while spawn_and_wait ran (0: not yet).
int preempt_received();

// Pure: the environment `base` (NAME=VALUE entries, null-terminated, like environ) with `extra`
// set over it, sorted by name; entries without '=' are dropped.
std::vector<std::string> merged_environment(const char* const* base, const EnvList& extra);

}  // namespace xlaunch::launcher
