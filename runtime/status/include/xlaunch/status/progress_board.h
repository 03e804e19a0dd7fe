// The progress board's layout: what each rank is doing, where every rank of the machine (and the
// launcher) can read it. One small file per rank, `progress-<rank>` in the job's status directory
// (status_dir.h), mapped into memory: the rank writes it with plain stores (no system calls on the
// training path; runtime/src/watch/board.h creates it and the watchdog keeps it), the other ranks'
// watchdogs and the launcher's flight recorder (flight_recorder.h) map it read-only.
//
// It holds the rank's identity (pid, host), how it ended (when it did), its optimizer step, whether
// it has joined (uneven inputs), its last sign of work and where in the step it was, its collective
// counters and a ring of its last kRing collectives: sequence number, op, dtype, element count,
// bucket, and when it was issued, started and finished. Sequence numbers count every collective a
// rank issues, on any communicator, in program order: ranks that run the same program give the same
// collective the same number, so rank A's #457 and rank B's #457 are meant to be the same
// collective, and a rank whose count is below 457 never entered it.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace xlaunch::status {

inline constexpr int kRing = 64;
inline constexpr uint32_t kBoardMagic = 0x786c6233;  // "xlb3"

enum class CollState : int32_t { Empty = 0, Issued = 1, Running = 2, Done = 3, Failed = 4 };
enum class Life : int32_t { Running = 0, Exited = 1 };

// Where the training loop last showed a sign of work (Board::phase): taking a batch, in a forward,
// in a backward. Named by phase_name().
enum class Phase : int32_t { None = 0, Batch = 1, Forward = 2, Backward = 3 };
const char* phase_name(Phase p);  // "", "batch", "forward", "backward"

struct CollectiveRecord {
  std::atomic<uint64_t> seq;  // written last: a reader that sees seq sees the fields below
  char op[16];
  char dtype[16];
  int64_t numel;
  int32_t elem_bytes;
  int32_t bucket;  // -1: not a gradient bucket
  // The state with the sequence number it is the state of: tagged(seq, CollState). Each change is a
  // compare-and-set from the same collective's earlier state, so a change that comes late for a
  // collective whose slot a newer one has taken (NCCL's completions are seen by a 100 ms poll, and
  // more than kRing collectives may be in flight) changes nothing: the newer one stays open, and
  // when it hangs the watchdog still sees it.
  std::atomic<uint64_t> state;
  std::atomic<int64_t> issued_ns, start_ns, end_ns;  // CLOCK_REALTIME

  // Its state while it holds collective `seq`; Empty when it holds another one.
  CollState state_of(uint64_t seq) const;
};

inline uint64_t tagged(uint64_t seq, CollState s) { return seq << 3 | static_cast<uint64_t>(s); }

struct Board {
  uint32_t magic;
  int32_t rank, world;
  int32_t pid;
  char host[64];
  std::atomic<int32_t> life;
  std::atomic<int32_t> exit_status;
  std::atomic<int64_t> exit_ns;
  std::atomic<int64_t> step;            // optimizer steps taken
  std::atomic<int64_t> step_ns;         // when the last one was taken
  // Uneven inputs (Accelerator::join): 1 while this rank's data has ended and it only takes part in
  // the others' steps; it then waits for them, and is not stuck while they work.
  std::atomic<int32_t> joined;
  std::atomic<int64_t> alive_ns;        // the training loop's last sign of work (batch, forward, backward)
  std::atomic<int32_t> phase;           // which of those it was (Phase)
  std::atomic<uint64_t> issued;         // collectives issued: the next one gets this number
  std::atomic<uint64_t> completed;      // collectives finished
  std::atomic<int64_t> last_done_ns;    // when the last one finished
  CollectiveRecord ring[kRing];

  CollectiveRecord& slot(uint64_t seq) { return ring[seq % kRing]; }
  const CollectiveRecord& slot(uint64_t seq) const { return ring[seq % kRing]; }
  // The record of `seq` if the ring still holds it.
  const CollectiveRecord* find(uint64_t seq) const {
    const CollectiveRecord& r = slot(seq);
    return r.seq.load(std::memory_order_acquire) == seq && r.state_of(seq) != CollState::Empty ? &r : nullptr;
  }

  // The collective log's changes (watchdog.h: issued, started, finished), on this rank's board.
  // Takes `seq`'s slot (the oldest record goes) and fills it; `seq` is Issued when this returns.
  void log_issued(uint64_t seq, const char* op, const char* dtype, int64_t numel, int elem_bytes, int bucket, int64_t t);
  // Issued -> Running; false (nothing written) when the slot no longer holds `seq`.
  bool log_started(uint64_t seq, int64_t t);
  // Issued or Running -> Done or Failed; false (nothing written) when the slot no longer holds `seq`.
  bool log_finished(uint64_t seq, bool ok, int64_t t);
};

// The oldest collective of the board's rank that has not finished (Issued or Running), if any.
const CollectiveRecord* oldest_open(const Board& b);

// Maps rank `rank`'s board in dir read-only; nullptr while it does not exist yet, or when it is not
// a regular file owned by this user (a file someone else planted is never read), or not (yet) a
// board of this layout. unmap_board() gives it back.
const Board* map_board(const std::string& dir, int rank);
void unmap_board(const Board* b);

}  // namespace xlaunch::status
