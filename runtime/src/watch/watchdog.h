// The collective watchdog: no wait of the job is unbounded, and when one ends it says who was
// waited for, on what, and for how long.
//
// Every collective a rank issues is logged on its progress board (board.h) as issued, running and
// finished; the training step too. A thread in every rank looks at the boards every 100 ms:
//  1. A peer has left the job (exited, or its process is gone) without ever entering the collective
//     this rank waits in: a peer that left with status 0 ("finished early") fails the job at once; one
//     that failed is given 2 s for mpirun to end the job first. Either way this rank writes the verdict
//     and exits with 1.
//  2. A communicator's poller (add_poller) reports an error: the verdict is that error. The pollers
//     run on a thread of their own, so the watchdog itself never calls into CUDA or NCCL: a round of
//     them that has not returned for timeout_s (a query blocked in the driver) is a verdict of its
//     own, exit 124, naming the device.
//  3. This rank's oldest unfinished collective has made no progress for timeout_s (measured from
//     when it started, or from the last collective this rank finished, whichever is later): the job
//     is stuck. A joined rank (uneven inputs: its data ended, and it waits in the collectives of the
//     others' steps, set_joined) waits for their work, not for a collective: its clock also restarts
//     with the last sign of work of every rank that has not joined (a batch, a forward, a backward,
//     a collective: mark_alive), so it is stuck only when they all show none for timeout_s; when it
//     cannot see their boards, it leaves the judgement to them. A verdict never names a joined rank
//     as the one that never came. The verdict names the collective (sequence number, op, bucket, size), the ranks that
//     entered it and those that never did, each with its last finished collective and training
//     step; this rank exits with 124.
// The first rank to reach a verdict writes it to `verdict` in the status directory (O_EXCL: one
// verdict per job) and prints it; `xlaunch run` reports it and returns its exit code.
//
// With debug on, each collective is also compared with every rank's collective of the same
// sequence number before it runs: op, dtype and element count; a mismatch fails every rank with
// both sides named, instead of a hang or a crash inside MPI.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "xlaunch/env_vars.h"
#include "xlaunch/status/progress_board.h"

namespace xlaunch::watch {

struct Settings {
  int rank = 0;
  int world = 1;
  std::string dir;           // the status directory; empty: boards in this process's memory only
  double timeout_s = env::default_float(env::kTimeoutS);  // XLAUNCH_TIMEOUT_S; 0: no watchdog
  bool debug = env::default_bool(env::kDebug);  // XLAUNCH_DEBUG: compare every collective across ranks
};

// Once per process, after MPI is up and before the first collective (see job_watch.h): creates
// this rank's board and starts the thread.
void start(const Settings& s);
// Maps every other rank's board; call once every rank has started (after a barrier), so that a
// rank which leaves early is seen even if it removes its board on the way out.
void open_peer_boards();
// No watchdog in this process (XLAUNCH_TIMEOUT_S=0): the collective log below does nothing; a
// non-zero exit still skips MPI_Finalize.
void disable(const Settings& s);
// The settings start() was given (defaults before it).
const Settings& settings();

// From the process's exit handler: records how the process ends on its board, so waiting peers
// learn it at once. Returns whether the process must end without finalizing MPI (a non-zero
// status in a world of several ranks: the others may still be in collectives it will not join).
bool record_exit(int status);

// Communicators whose collectives finish on a device (NCCL) are polled on the pollers' thread (not
// the watchdog's, which judges without them): poll(false) every 100 ms marks finished collectives and returns a non-empty error when the
// transport failed (the watchdog then ends the job with it; an exception it throws is such an
// error too); poll(true) once, when the watchdog ends the job, to abort the transport: after the
// verdict and the exit record are published, on a helper thread, and the process exits after at
// most 5 s whether or not the abort returned. Returns an id for remove_poller (before the poller's
// state goes).
int add_poller(std::function<std::string(bool ending)> poll);
void remove_poller(int id);

// ---- the collective log, for the communicators (a few stores each) ----

// Marks the collectives issued by this thread until destroyed as gradient bucket `bucket`'s.
class BucketScope {
 public:
  explicit BucketScope(int bucket);
  ~BucketScope();
  BucketScope(const BucketScope&) = delete;
  BucketScope& operator=(const BucketScope&) = delete;

 private:
  int saved_;
};

// The bucket BucketScope marks on this thread, or -1.
int current_bucket();

// On the issuing thread, in program order: the collective's sequence number.
uint64_t issued(const char* op, const char* dtype, int64_t numel, int elem_bytes);
// When it starts running. With debug on, first compares it with every rank's collective of the
// same number; throws CommError on a mismatch.
void started(uint64_t seq);
void finished(uint64_t seq, bool ok);
// Optimizer steps taken (for the verdict's "at step S").
void set_step(int64_t step);
// Whether this rank has joined (Accelerator::join), on its board.
void set_joined(bool joined);
// The training loop's sign of work (a batch handed over, a forward, a backward), and which: two
// stores. The flight recorder names it for a rank that never entered a collective ("in forward").
void mark_alive(status::Phase phase);

}  // namespace xlaunch::watch
