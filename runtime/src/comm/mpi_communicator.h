// The CPU communicator: MPI over MPI_COMM_WORLD (a duplicate of it, so user MPI traffic cannot
// collide with ours). All MPI calls happen on the communication thread (see ThreadedCommunicator).
// float16/bfloat16 tensors travel as 16-bit values, reduced by user-defined operations (mpi_half_ops.h).
#pragma once

#include <mpi.h>

#include "comm/threaded_communicator.h"

namespace xlaunch {

class MpiCommunicator final : public ThreadedCommunicator {
 public:
  // The process-wide instance (MPI is initialised by ProcessState when the world has > 1 rank).
  static std::shared_ptr<MpiCommunicator> world();

  MpiCommunicator();
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "mpi"; }

 protected:
  void run_allreduce(at::Tensor& t, ReduceOp op) override;
  void run_broadcast(at::Tensor& t, int root) override;
  void run_allgather(const at::Tensor& in, at::Tensor& out) override;
  void run_barrier() override;

 private:
  int rank_ = 0;
  int size_ = 1;
  MPI_Comm comm_ = MPI_COMM_NULL;
};

}  // namespace xlaunch
