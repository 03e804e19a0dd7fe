// Gradient allreduce through shared memory, for ranks that all share one machine.
//
// Why: on a CPU machine the ranks share the memory bus, and MPI's allreduce copies every byte
// through its own buffers several times while busy-polling a core that backward needs. Here the
// gradient buckets themselves live in POSIX shared memory that every rank maps, so an allreduce
// is: (1) a barrier (every rank's bucket is final); (2) rank r reduces its 1/world slice across
// all ranks' buckets and writes the result into every rank's bucket; (3) a barrier (every slice is
// written). No staging copies; the waits spin briefly, then sleep on a futex, so a waiting rank
// gives its core back to the others.
//
// Only buffers from allocate() take the shared path (the reducer allocates its buckets there);
// anything else, and broadcast/allgather/barrier, is forwarded to the MPI communicator, whose
// collectives are issued in the same program order on every rank.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "xlaunch/threaded_communicator.h"

namespace xlaunch {

class ShmCommunicator final : public ThreadedCommunicator {
 public:
  // Collective over `fallback`'s ranks, which must all run on this machine. Throws CommError when
  // shared memory cannot be set up (the caller then keeps using `fallback`).
  explicit ShmCommunicator(std::shared_ptr<Communicator> fallback);
  ~ShmCommunicator() override;

  int rank() const override { return fallback_->rank(); }
  int size() const override { return fallback_->size(); }
  std::string name() const override { return "shm"; }

  // Collective (every rank, same order, same sizes): a tensor in shared memory that every rank
  // maps. Throws CommError when /dev/shm has no room.
  at::Tensor allocate(int64_t numel, const at::TensorOptions& options) override;

  std::shared_ptr<Work> allreduce_async(at::Tensor t, ReduceOp op) override;
  std::shared_ptr<Work> broadcast_async(at::Tensor t, int root) override { return fallback_->broadcast_async(t, root); }
  std::shared_ptr<Work> allgather_async(at::Tensor in, at::Tensor out) override {
    return fallback_->allgather_async(in, out);
  }
  std::shared_ptr<Work> barrier_async() override { return fallback_->barrier_async(); }

 protected:
  void run_allreduce(at::Tensor& t, ReduceOp op) override;
  void run_broadcast(at::Tensor&, int) override {}
  void run_allgather(const at::Tensor&, at::Tensor&) override {}
  void run_barrier() override {}

 private:
  struct Control;
  struct Segment {
    size_t bytes = 0;
    std::vector<char*> maps;  // every rank's mapping of its buffer, by rank
  };
  void barrier(int which);
  bool any_failed(bool failed_here);  // over every rank, through the MPI communicator
  const Segment* find(const at::Tensor& t) const;

  std::shared_ptr<Communicator> fallback_;
  std::string prefix_;
  Control* ctl_ = nullptr;
  std::vector<Segment> segments_;
};

}  // namespace xlaunch
