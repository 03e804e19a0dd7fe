// The CPU communicator: MPI over MPI_COMM_WORLD (a duplicate of it, so user MPI traffic cannot
// collide with ours). All MPI calls happen on the communication thread (see ThreadedCommunicator).
// float16/bfloat16 tensors travel as 16-bit values, reduced by user-defined operations (mpi_half_ops.h).
// Sub-communicators (split) share the world's communication thread.
#pragma once

#include <mpi.h>

#include <atomic>
#include <vector>

#include "comm/mpi_reduce_scatter.h"
#include "comm/threaded_communicator.h"

namespace xlaunch {

class MpiCommunicator final : public ThreadedCommunicator {
 public:
  // The process-wide instance (MPI is initialised by ProcessState when the world has > 1 rank).
  static std::shared_ptr<MpiCommunicator> world();

  MpiCommunicator();
  ~MpiCommunicator() override;

  // Collective over this communicator's ranks (logged as "split"): the ranks that pass the same
  // color form a sub-communicator, ranked by key (ties by rank here), as MPI_Comm_split does.
  // Returns nullptr on the ranks that pass MPI_UNDEFINED. The sub-communicator runs its collectives
  // on this communicator's thread, in one program order with this one's; its rank() and size()
  // are its own.
  std::shared_ptr<MpiCommunicator> split(int color, int key);

  // The underlying MPI communicator, for code that runs on the communication thread only (a
  // collective's op, comm_thread().run_local): MPI calls belong on that thread.
  MPI_Comm mpi_comm() const { return comm_; }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "mpi"; }

  // The reduce-scatter algorithm: Auto (by size, see reduce_scatter_algorithm in
  // mpi_reduce_scatter.h) unless a test or a benchmark forces one. Read as each reduce-scatter
  // runs: set it while none is in flight, to the same on every rank.
  void force_reduce_scatter(ReduceScatterAlgorithm algorithm) { forced_reduce_scatter_ = algorithm; }

 protected:
  void run_allreduce(at::Tensor& t, ReduceOp op) override;
  void run_broadcast(at::Tensor& t, int root) override;
  void run_allgather(const at::Tensor& in, at::Tensor& out) override;
  void run_barrier() override;
  void run_reduce_scatter(at::Tensor& in, at::Tensor& out, ReduceOp op) override;

 private:
  friend class MachineShardGroup;  // runs its machine's and its replicas' parts in one item
  MpiCommunicator(std::shared_ptr<CommThread> shared, MPI_Comm comm, int rank, int size);

  int rank_ = 0;
  int size_ = 1;
  MPI_Comm comm_ = MPI_COMM_NULL;
  std::atomic<ReduceScatterAlgorithm> forced_reduce_scatter_{ReduceScatterAlgorithm::Auto};
  std::vector<char> scratch_;  // the reduce-scatter's partial results; communication thread only
  std::vector<char> gather_scratch_;  // an allgather of more than kMaxChunk per rank, piece by piece
};

}  // namespace xlaunch
