// Gradient allreduce through shared memory, for ranks that all share one machine.
//
// Why: on a CPU machine the ranks share the memory bus, and MPI's allreduce copies every byte
// through its own buffers several times while busy-polling a core that backward needs. Here the
// gradients themselves live in POSIX shared memory that every rank maps (the reducer's buckets,
// from allocate(), and the gradient pool, from reserve_shared_pool(), where autograd writes fresh
// gradients; see grad_capture.h), so an allreduce of a list of tensors is:
//  1. each rank publishes where its tensors are (segment, offset) in a table in shared memory;
//  2. a barrier (every rank's tensors are final, and their places are known);
//  3. rank r reduces its 1/world slice of the tensors' concatenated elements, reading every rank's
//     copy where it lies and writing the result into every rank's copy;
//  4. a barrier (every slice is written everywhere).
// No staging copies; each element is read and written once per rank that holds it. The barriers
// are shm_barrier.h's, the segments shm_segment.h's, and the reduction loop is the kernels'
// reduce_copies (kernels/include/xlaunch/kernels/cpu_reduce.h).
//
// Reduce-scatter (sharded data parallelism) is the same protocol without the write-back: after the
// first barrier, rank r reduces chunk r over every rank's copy straight into its own `out`, and the
// second barrier says every copy was read. Each rank reads size() * out.numel() elements and writes
// out.numel() (an allreduce reads and writes the whole tensor). Allgather copies: every rank reads
// every other rank's part where it lies (or writes its part into every rank's output), between the
// same two barriers.
//
// Only tensors in that memory take the shared path; anything else, and broadcast/barrier, is
// forwarded to the MPI communicator, whose collectives are issued in the same program order on
// every rank. Every shared-memory collective is one item on this communicator's thread, logged on
// the progress board, so the watchdog bounds its barriers as it bounds any collective.
//
// Across machines (hierarchical_communicator.h) one ShmCommunicator serves each machine's ranks,
// and the *_through_staging() calls are its part of the hierarchical collectives.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "comm/comm_thread.h"
#include "comm/shared_memory.h"

namespace xlaunch {

class ShmCommunicator final : public Communicator, public SharedMemoryTransport {
 public:
  // Collective over `fallback`'s ranks, which must all run on this machine. Throws CommError when
  // shared memory cannot be set up (the caller then keeps using `fallback`).
  // `agree_over`: the ranks with which every setup step (this constructor, allocate, reserve_pool,
  // reserve_staging) agrees on success; default `fallback`'s. A hierarchical communicator passes the
  // whole job, whose every machine has its own ShmCommunicator, so that a failure on one machine
  // makes every machine do without shared memory alike. Warnings come from its rank 0.
  explicit ShmCommunicator(std::shared_ptr<Communicator> fallback, std::shared_ptr<Communicator> agree_over = nullptr);
  ~ShmCommunicator() override;

  int rank() const override { return fallback_->rank(); }
  int size() const override { return fallback_->size(); }
  std::string name() const override { return "shm"; }

  // Collective (every rank, same order, same sizes): a tensor in shared memory that every rank
  // maps. When /dev/shm has no room on some rank, every rank gets plain memory instead (and the
  // tensor is then reduced through MPI), with a warning from rank 0.
  at::Tensor allocate(int64_t numel, const at::TensorOptions& options) override;
  // Collective: a pool in shared memory for this rank's gradients; nullptr on every rank when
  // /dev/shm has no room on some rank. The pool's blocks stay valid after the communicator is gone.
  SharedPool* reserve_pool(size_t bytes) override;
  // CPU float or double, contiguous, and inside allocate()'s or the pool's memory (or empty).
  bool holds(const at::Tensor& t) const override;

  std::shared_ptr<Work> allreduce_async(at::Tensor t, ReduceOp op) override;
  std::shared_ptr<Work> allreduce_coalesced_async(std::vector<at::Tensor> ts, ReduceOp op) override;
  std::shared_ptr<Work> broadcast_async(at::Tensor t, int root) override { return fallback_->broadcast_async(t, root); }
  std::shared_ptr<Work> barrier_async() override { return fallback_->barrier_async(); }

  // Through shared memory when `in` lies in it (holds(), the same on every rank), else the fallback
  // (16-bit and integer types, plain memory, empty tensors). `out` may be anywhere, `in`'s chunk
  // rank() included (reduced in place). `in` is left as it was.
  std::shared_ptr<Work> reduce_scatter_async(at::Tensor in, at::Tensor out, ReduceOp op) override;
  // Through shared memory when `in` lies in it (each rank copies the others' parts from where they
  // lie into its own `out`, which may be anywhere; `in` may be `out`'s chunk rank()), or else when
  // `out` lies in it (each rank copies its `in` into every rank's `out`); whichever it is, the same
  // on every rank. Otherwise (neither held, empty tensors) the fallback. Each rank writes
  // (size() - 1) * in.numel() elements.
  std::shared_ptr<Work> allgather_async(at::Tensor in, at::Tensor out) override;

  // Where its shared-memory allreduces run (tests observe it).
  CommThread& comm_thread() { return thread_; }

  // ---- the machine's part of a hierarchical allreduce (hierarchical_communicator.h) ----

  // Collective (and agreed over `agree_over`): a staging buffer of at least `bytes` in shared memory,
  // one per machine, mapped by every rank of it. false on every rank when some machine could not
  // make one (what there was stays, and rank 0 warns).
  bool reserve_staging(size_t bytes);
  // Synchronous, on every rank of this machine, on the one thread that issues this communicator's
  // shared-memory collectives (the caller's; never beside allreduce_async's). ts: every tensor held
  // (holds()), one dtype, as for allreduce_coalesced_async. The tensors' concatenated elements go
  // through the staging buffer in pieces of its size; for each piece:
  //  1. every rank reduces its 1/size() slice of the piece over every rank's copy into staging
  //     (Max: the maximum; Sum and Avg: the sum); barrier;
  //  2. this machine's rank 0 calls across(staged): a tensor over the staging piece, which it
  //     replaces with the reduction over all machines; barrier;
  //  3. every rank copies staging into its own tensors, divided by avg_over for Avg; barrier (the
  //     staging buffer and the tables are free again).
  // Throws CommError without staging.
  void allreduce_through_staging(const std::vector<at::Tensor>& ts, ReduceOp op, int avg_over,
                                 const std::function<void(at::Tensor& staged)>& across);

  // The machine's part of a hierarchical reduce-scatter, under the same rules as above. `in` (held)
  // holds order.size() chunks of out.numel() elements (one per rank of the job); they go through
  // staging as blocks, block b holding chunk order[b], in windows of `width` elements of every chunk
  // (as many as staging holds). For each window:
  //  1. every rank reduces its 1/size() slice of the blocks over every rank's copy of `in` into
  //     staging (Max: the maximum; Sum and Avg: the sum); barrier;
  //  2. this machine's rank 0 calls across(staged, width): at least block `mine` of every rank of
  //     this machine must then hold the reduction over all machines; barrier;
  //  3. every rank copies block `mine` into its `out`, divided by avg_over for Avg; barrier.
  // Per window of the job's W chunks, each rank reads W * width / size() elements of every rank's
  // copy and writes as many, then copies width out.
  void reduce_scatter_through_staging(const at::Tensor& in, const at::Tensor& out, ReduceOp op, int avg_over,
                                      const std::vector<int>& order, int mine,
                                      const std::function<void(at::Tensor& staged, int64_t width)>& across);
  // The machine's part of a hierarchical allgather: `out` receives order.size() chunks of
  // in.numel() elements (any tensors of this rank, any dtype), through staging in windows as above:
  //  1. every rank copies its window of `in` into block `mine`; barrier;
  //  2. this machine's rank 0 calls across(staged, width), which fills every other block; barrier;
  //  3. every rank copies block b into chunk order[b] of its `out`, for every b; barrier.
  void allgather_through_staging(const at::Tensor& in, const at::Tensor& out, const std::vector<int>& order, int mine,
                                 const std::function<void(at::Tensor& staged, int64_t width)>& across);

 private:
  struct Control;
  struct Place {  // where a rank's tensor lies: segment index (-1: empty tensor) and byte offset
    int64_t segment;
    int64_t offset;
  };
  struct Segment {
    size_t bytes = 0;
    std::vector<char*> maps;       // every rank's mapping of its buffer, by rank
    SharedPool* pool = nullptr;    // set when this rank's buffer is the gradient pool
    // Set when the last tensor on an allocate()d buffer let go of it here: its addresses may then
    // belong to a newer mapping, which must not be taken for this segment.
    std::shared_ptr<std::atomic<bool>> released;
  };
  // Whether a setup step failed anywhere (agreed through the MPI communicator). error: this rank's
  // ("" when the step went well here); on failure, the first failing rank's, the same on every rank.
  bool agree_failed(std::string& error);
  // Collective: one segment per rank, mapped by every rank; false on every rank if any failed
  // (rank 0 then warns: "xlaunch: <consequence>: <why>").
  bool map_segments(size_t bytes, Segment& seg, const char* consequence);
  bool locate(const at::Tensor& t, Place& where) const;
  // On the communication thread; places[k]: where ts[k] lies here (from locate()).
  void run_coalesced(const std::vector<at::Tensor>& ts, const std::vector<Place>& places, ReduceOp op);
  // The shared-memory allreduces' rounds: ts in runs of as many tensors as a rank's place table
  // holds; for each, publishes their places (places[k]: ts[k]'s) in this rank's table, waits until
  // every rank has, and calls round(first, count, total elements of the run). round must end with a
  // barrier: the next round rewrites the tables.
  void in_rounds(const std::vector<at::Tensor>& ts, const std::vector<Place>& places,
                 const std::function<void(size_t first, size_t count, int64_t total)>& round);
  // The barrier of this machine's ranks between the steps of every shared-memory collective.
  void machine_barrier();
  // On the communication thread: reduce-scatter of `in` (at `where`), and allgather with the held
  // tensor (`in` when pull, else `out`) at `where`.
  void run_reduce_scatter(const at::Tensor& in, const at::Tensor& out, Place where, ReduceOp op);
  void run_allgather(const at::Tensor& in, const at::Tensor& out, Place where, bool pull);
  // How many elements of every chunk one window of a staged collective holds: throws CommError
  // when the staging buffer cannot hold one element of each of `chunks` (or there is none).
  int64_t staging_width(int64_t chunks, int64_t elem, const char* collective) const;
  Place* places_of(int rank) const;
  // Where rank q's copy of the k-th tensor of the current round of the place table lies, `bytes` in.
  char* peer_data(int q, size_t k, int64_t bytes) const;

  std::shared_ptr<Communicator> fallback_;
  std::shared_ptr<Communicator> agree_;  // agree_over, or fallback_
  std::string prefix_;
  char* staging_ = nullptr;  // the machine's staging buffer (reserve_staging)
  size_t staging_bytes_ = 0;
  int staging_count_ = 0;    // how many were made: names the next
  Control* ctl_ = nullptr;
  size_t ctl_bytes_ = 0;
  std::vector<Segment> segments_;
  CommThread thread_;
};

}  // namespace xlaunch
