// Gradient allreduce for a job over several machines with several ranks on each: shared memory
// inside a machine, MPI between machines, and only one rank per machine (its leader, local rank 0)
// on the network.
//
// Why: a flat MPI allreduce over every rank sends each machine's data over its link once per rank
// there (ring or recursive doubling alike); reducing inside the machine first sends it once. On a
// 1 Gbit/s link that is the step's largest cost.
//
// An allreduce of a list of tensors that live in shared memory (the reducer's buckets and gradient
// pool, as with ShmCommunicator) is ONE item on the world communicator's thread, run there in
// program order on every rank, in pieces of the machine's staging buffer:
//  1. the ranks of each machine reduce their copies into the machine's staging buffer, each rank its
//     1/local slice (ShmCommunicator::allreduce_through_staging, with its barriers);
//  2. each machine's leader reduces the staging buffer across machines over the leaders' MPI
//     communicator: MPI_Allreduce for small pieces, a ring reduce-scatter then allgather
//     (MPI_Sendrecv) for large ones; it may call MPI there because it is the MPI thread;
//  3. every rank copies the result into its own tensors (Avg: divided by the job's size).
// Every MPI call of the process stays on the world's thread (MPI_THREAD_SERIALIZED): the machine's
// and the leaders' communicators are splits of the world that share it (MpiCommunicator::split).
// Waits are bounded as everywhere: the item is a collective on the progress board, and the
// watchdog ends the job when it makes no progress for timeout_s, naming it and the missing ranks.
//
// Reduce-scatter (sharded data parallelism; `in` in shared memory) is the same item with two
// changes: the chunks are staged machine by machine (staging_order: machines by leader, their ranks
// by rank), so that the chunks of one machine's ranks lie together whatever the layout; and in
// step 2 the leaders only reduce-scatter (leader m ends with its machine's chunks; MPI_Allreduce for
// pieces under 1 MiB, as above), and in step 3 each rank copies only its own chunk. Allgather
// (`in` or `out` in shared memory) is the reverse: each rank copies its part into its machine's
// blocks of staging, the leaders ring-allgather the machines' blocks, and every rank copies every
// block into its `out`. Bytes moved, for N elements of `in` (reduce-scatter) or `out` (allgather)
// over W ranks on M machines:
//  - reduce-scatter: inside a machine every rank reads N elements (its 1/local slice of each local
//    copy) and writes N / local into staging; each leader sends (M - 1) / M * N over the network
//    (an allreduce: twice that); every rank copies N / W out.
//  - allgather: every rank writes N / W into staging; each leader sends (M - 1) / M * N; every rank
//    copies N out of staging.
//
// Everything else (tensors outside shared memory, broadcast, barrier) goes to the world MPI
// communicator.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/mpi_communicator.h"
#include "comm/shared_memory.h"
#include "comm/shm_communicator.h"

namespace xlaunch {

// Which ranks share a machine, from each rank's shared-memory domain (by rank: kernel boot id and
// /dev/shm; see Accelerator::bucket_communicator).
struct MachineLayout {
  std::vector<int> leader;    // by rank: the lowest rank of its machine
  int machines = 0;
  int ranks_per_machine = 0;  // 0 when machines hold different numbers of ranks
};
MachineLayout machine_layout(const std::vector<std::string>& domains);

// The order in which a hierarchical reduce-scatter or allgather stages the job's chunks: machine by
// machine (machines by leader, the order of the leaders' communicator), each machine's ranks by
// rank (its local ranks). rank[b]: the rank whose chunk is block b; machine_first[m]: machine m's
// first block (machines + 1 entries); block: by rank, where its chunk is staged.
struct StagingOrder {
  std::vector<int> rank;
  std::vector<int> machine_first;
  std::vector<int> block;
};
StagingOrder staging_order(const MachineLayout& layout);

// What cpu_allreduce "auto" picks for a layout: "shm" (one machine, several ranks), "hier" (several
// machines, the same number of ranks on each, more than one), else "mpi".
std::string auto_cpu_allreduce(const MachineLayout& layout);

class HierarchicalCommunicator final : public Communicator,
                                       public SharedMemoryTransport,
                                       public std::enable_shared_from_this<HierarchicalCommunicator> {
 public:
  // Collective over `world`, whose ranks lie on machines as `layout` says (every rank passes the
  // same layout). Throws CommError, on every rank alike, when shared memory cannot be set up on
  // some machine (the caller then uses `world` for everything).
  HierarchicalCommunicator(std::shared_ptr<MpiCommunicator> world, const MachineLayout& layout);
  ~HierarchicalCommunicator() override;

  int rank() const override { return world_->rank(); }
  int size() const override { return world_->size(); }
  std::string name() const override { return "hier"; }

  // As ShmCommunicator's, agreed over the whole job: when some machine has no room in /dev/shm,
  // every rank gets plain memory (reduced by flat MPI), so no machine takes another path than the
  // others. allocate() also grows the machines' staging buffers to the largest bucket (up to 256 MiB).
  at::Tensor allocate(int64_t numel, const at::TensorOptions& options) override;
  SharedPool* reserve_pool(size_t bytes) override { return shm_->reserve_pool(bytes); }
  bool holds(const at::Tensor& t) const override { return shm_->holds(t); }

  std::shared_ptr<Work> allreduce_async(at::Tensor t, ReduceOp op) override;
  std::shared_ptr<Work> allreduce_coalesced_async(std::vector<at::Tensor> ts, ReduceOp op) override;
  // The fp16/bf16 hooks: inside each machine the copies are summed in full precision (shared
  // memory, no bytes to save there); only the leaders' exchange travels in `wire`, divided by the
  // job's size first. Tensors outside shared memory: the default (flat, in `wire`).
  std::shared_ptr<Work> allreduce_compressed_async(std::vector<at::Tensor> ts, ReduceOp op,
                                                   at::ScalarType wire) override;
  std::shared_ptr<Work> broadcast_async(at::Tensor t, int root) override { return world_->broadcast_async(t, root); }
  std::shared_ptr<Work> barrier_async() override { return world_->barrier_async(); }
  // Hierarchical (above) when `in` lies in shared memory (holds(), the same on every rank); else the
  // world's (16-bit and integer types, plain memory, empty tensors). `out` may be anywhere, `in`'s
  // chunk rank() included. One item on the world's thread.
  std::shared_ptr<Work> reduce_scatter_async(at::Tensor in, at::Tensor out, ReduceOp op) override;
  // Hierarchical when `in` or `out` lies in shared memory (the same on every rank); else the world's.
  std::shared_ptr<Work> allgather_async(at::Tensor in, at::Tensor out) override;

  // This machine's ranks (local rank = its rank()), and the leaders' (nullptr off the leaders).
  const std::shared_ptr<MpiCommunicator>& local() const { return local_; }
  const std::shared_ptr<MpiCommunicator>& leaders() const { return leaders_; }
  // The ranks of this rank's local rank, one per machine (this rank's machine's place = its rank()).
  const std::shared_ptr<MpiCommunicator>& replicas() const { return replicas_; }

  // Hybrid sharding (ddp.shard_group machine): a communicator over this machine's ranks whose
  // reduce-scatter also sums each chunk over the replicas (MachineShardGroup below). Not
  // collective: every group of this communicator shares its memory and its thread.
  std::shared_ptr<Communicator> machine_group();

 private:
  // Whether every tensor lies in this machine's shared memory, all of one dtype: the hierarchical path.
  bool all_held(const std::vector<at::Tensor>& ts) const;
  // One collective on the world's thread: ShmCommunicator::allreduce_through_staging with `across`.
  std::shared_ptr<Work> through_staging(std::vector<at::Tensor> ts, ReduceOp op, std::function<void(at::Tensor&)> across);
  // Step 2, on a leader, on the world's thread: staged becomes its reduction over the machines.
  void across_machines(at::Tensor& staged, ReduceOp op);
  // The same in `wire` (float16/bfloat16): one MPI_Allreduce of 16-bit values between the leaders.
  void across_machines_in(at::ScalarType wire, at::Tensor& staged, ReduceOp op);
  // The leaders' steps of the hierarchical reduce-scatter and allgather, on the world's thread, over
  // staging windows of `width` elements per rank laid out by order_.
  void reduce_scatter_across(at::Tensor& staged, int64_t width, ReduceOp op);
  void allgather_across(at::Tensor& staged, int64_t width);
  // A ring over the leaders on `data`, in blocks [first[m], first[m + 1]) elements (machines + 1
  // entries, blocks of any length): the reduce-scatter leaves leader m with block m reduced over
  // every leader; the allgather, starting from that, leaves every leader with every block. Each
  // step sends one block to the right while receiving one from the left (MPI_Sendrecv), so each
  // link carries every block once per phase.
  // The machines' blocks of a staging window of `width` elements per rank, in elements.
  std::vector<int64_t> machine_blocks(int64_t width) const;
  void ring_reduce_scatter(at::Tensor& data, const std::vector<int64_t>& first, ReduceOp op);
  void ring_allgather(at::Tensor& data, const std::vector<int64_t>& first);

  std::shared_ptr<MpiCommunicator> world_;
  std::shared_ptr<MpiCommunicator> local_;
  std::shared_ptr<MpiCommunicator> leaders_;
  std::shared_ptr<MpiCommunicator> replicas_;
  std::unique_ptr<ShmCommunicator> shm_;  // over local_, agreeing over world_
  std::vector<char> block_;               // a leader's reduce-scatter block (world's thread only)
  StagingOrder order_;                    // how reduce-scatter and allgather stage the chunks
  friend class MachineShardGroup;
};

// Hybrid sharding (ddp.shard_group machine, FSDP's HYBRID_SHARD, docs/memory.md): ZeRO's shards are
// cut over one machine's L ranks (rank() is the local rank, size() is L), and the M machines hold
// replicas of them, so parameter allgathers never leave the machine and only the reduced gradient
// shards cross the network:
//  - reduce_scatter_async: one item on the world's thread: the machine's ranks sum their copies
//    and each keeps its chunk (through the machine's staging buffer when `in` is in shared memory,
//    else MPI over the machine), then each rank sums its chunk with its replicas (MPI_Allreduce over
//    replicas(): every rank of a machine talks to its peers at once, each 1/L of the bytes), and
//    Avg divides by the job's size once, as the whole job's reduce-scatter does;
//  - allgather_async: inside the machine only (shared memory, or MPI over the machine);
//  - allreduce, broadcast and barrier: over the machine's ranks (MPI).
// Bytes between machines per reduce-scatter of N elements: each machine sends 2 (M - 1) / M * N
// (an allreduce), against the whole job's sharding's (M - 1) / M * N per reduce-scatter plus as much
// per allgather of the parameters (two per step at stage 3 with reshard_after_forward).
class MachineShardGroup final : public Communicator, public SharedMemoryTransport {
 public:
  explicit MachineShardGroup(std::shared_ptr<HierarchicalCommunicator> hier);

  int rank() const override { return hier_->local_->rank(); }
  int size() const override { return hier_->local_->size(); }
  std::string name() const override { return "hier machine"; }
  // This rank's machine's place among the machines, and how many there are (the replicas).
  int replica() const { return hier_->replicas_->rank(); }
  int replicas() const { return hier_->replicas_->size(); }

  at::Tensor allocate(int64_t numel, const at::TensorOptions& options) override { return hier_->allocate(numel, options); }
  SharedPool* reserve_pool(size_t bytes) override { return hier_->reserve_pool(bytes); }
  bool holds(const at::Tensor& t) const override { return hier_->holds(t); }

  std::shared_ptr<Work> allreduce_async(at::Tensor t, ReduceOp op) override { return hier_->local_->allreduce_async(t, op); }
  std::shared_ptr<Work> broadcast_async(at::Tensor t, int root) override { return hier_->local_->broadcast_async(t, root); }
  std::shared_ptr<Work> barrier_async() override { return hier_->local_->barrier_async(); }
  std::shared_ptr<Work> reduce_scatter_async(at::Tensor in, at::Tensor out, ReduceOp op) override;
  std::shared_ptr<Work> allgather_async(at::Tensor in, at::Tensor out) override;

 private:
  std::shared_ptr<HierarchicalCommunicator> hier_;
  std::vector<int> order_;  // the machine's chunks in local-rank order (ShmCommunicator's staging)
};

}  // namespace xlaunch
