#include "xlaunch/status/progress_board.h"

#include <sys/mman.h>

#include <cstdio>

#include "xlaunch/status/private_files.h"
#include "xlaunch/status/status_dir.h"

namespace xlaunch::status {

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::Batch: return "batch";
    case Phase::Forward: return "forward";
    case Phase::Backward: return "backward";
    case Phase::None: break;
  }
  return "";
}

CollState CollectiveRecord::state_of(uint64_t seq) const {
  const uint64_t s = state.load(std::memory_order_acquire);
  return s >> 3 == seq ? static_cast<CollState>(s & 7) : CollState::Empty;
}

void Board::log_issued(uint64_t seq, const char* op, const char* dtype, int64_t numel, int elem_bytes, int bucket,
                       int64_t t) {
  CollectiveRecord& r = slot(seq);
  // First: from here on, a late change for the slot's previous collective fails its compare-and-set.
  r.state.store(tagged(seq, CollState::Empty), std::memory_order_release);
  r.seq.store(seq, std::memory_order_relaxed);
  std::snprintf(r.op, sizeof r.op, "%s", op);
  std::snprintf(r.dtype, sizeof r.dtype, "%s", dtype);
  r.numel = numel;
  r.elem_bytes = elem_bytes;
  r.bucket = bucket;
  r.start_ns.store(0, std::memory_order_relaxed);
  r.end_ns.store(0, std::memory_order_relaxed);
  r.issued_ns.store(t, std::memory_order_relaxed);
  r.state.store(tagged(seq, CollState::Issued), std::memory_order_release);
}

bool Board::log_started(uint64_t seq, int64_t t) {
  CollectiveRecord& r = slot(seq);
  uint64_t expected = tagged(seq, CollState::Issued);
  if (r.state.load(std::memory_order_acquire) != expected) return false;
  r.start_ns.store(t, std::memory_order_relaxed);
  return r.state.compare_exchange_strong(expected, tagged(seq, CollState::Running), std::memory_order_acq_rel);
}

bool Board::log_finished(uint64_t seq, bool ok, int64_t t) {
  CollectiveRecord& r = slot(seq);
  const uint64_t done = tagged(seq, ok ? CollState::Done : CollState::Failed);
  for (const CollState from : {CollState::Running, CollState::Issued}) {
    uint64_t expected = tagged(seq, from);
    if (r.state.load(std::memory_order_acquire) != expected) continue;
    r.end_ns.store(t, std::memory_order_relaxed);
    if (r.state.compare_exchange_strong(expected, done, std::memory_order_acq_rel)) return true;
  }
  return false;
}

const CollectiveRecord* oldest_open(const Board& b) {
  const uint64_t n = b.issued.load(std::memory_order_acquire);
  for (uint64_t seq = n > kRing ? n - kRing : 0; seq < n; ++seq) {
    const CollectiveRecord* r = b.find(seq);
    if (!r) continue;
    const CollState st = r->state_of(seq);
    if (st == CollState::Issued || st == CollState::Running) return r;
  }
  return nullptr;
}

const Board* map_board(const std::string& dir, int rank) {
  const void* p = files::map_own_file(progress_board_path(dir, rank), sizeof(Board));
  if (!p) return nullptr;
  const auto* b = static_cast<const Board*>(p);
  if (b->magic != kBoardMagic || b->rank != rank) {  // not (yet) a board: look again later
    munmap(const_cast<void*>(p), sizeof(Board));
    return nullptr;
  }
  return b;
}

void unmap_board(const Board* b) {
  if (b) munmap(const_cast<Board*>(b), sizeof(Board));
}

}  // namespace xlaunch::status
