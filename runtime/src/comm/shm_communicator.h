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
// Only tensors in that memory take the shared path; anything else, and broadcast/allgather/barrier,
// is forwarded to the MPI communicator, whose collectives are issued in the same program order on
// every rank.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "comm/comm_thread.h"
#include "comm/shared_memory.h"

namespace xlaunch {

class ShmCommunicator final : public Communicator, public SharedMemoryTransport {
 public:
  // Collective over `fallback`'s ranks, which must all run on this machine. Throws CommError when
  // shared memory cannot be set up (the caller then keeps using `fallback`).
  explicit ShmCommunicator(std::shared_ptr<Communicator> fallback);
  ~ShmCommunicator() override;

  int rank() const override { return fallback_->rank(); }
  int size() const override { return fallback_->size(); }
  std::string name() const override { return "shm"; }

  // Collective (every rank, same order, same sizes): a tensor in shared memory that every rank
  // maps. When /dev/shm has no room on some rank, every rank gets plain memory instead (and the
  // tensor is then reduced through MPI), with a warning from rank 0.
  at::Tensor allocate(int64_t numel, const at::TensorOptions& options) override;
  SharedMemoryTransport* shared_memory() override { return this; }
  // Collective: a pool in shared memory for this rank's gradients; nullptr on every rank when
  // /dev/shm has no room on some rank. The pool's blocks stay valid after the communicator is gone.
  SharedPool* reserve_pool(size_t bytes) override;
  // CPU float or double, contiguous, and inside allocate()'s or the pool's memory (or empty).
  bool holds(const at::Tensor& t) const override;

  std::shared_ptr<Work> allreduce_async(at::Tensor t, ReduceOp op) override;
  std::shared_ptr<Work> allreduce_coalesced_async(std::vector<at::Tensor> ts, ReduceOp op) override;
  std::shared_ptr<Work> broadcast_async(at::Tensor t, int root) override { return fallback_->broadcast_async(t, root); }
  std::shared_ptr<Work> allgather_async(at::Tensor in, at::Tensor out) override {
    return fallback_->allgather_async(in, out);
  }
  std::shared_ptr<Work> barrier_async() override { return fallback_->barrier_async(); }

  // Where its shared-memory allreduces run (tests observe it).
  CommThread& comm_thread() { return thread_; }

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
  Place* places_of(int rank) const;

  std::shared_ptr<Communicator> fallback_;
  std::string prefix_;
  Control* ctl_ = nullptr;
  size_t ctl_bytes_ = 0;
  std::vector<Segment> segments_;
  CommThread thread_;
};

}  // namespace xlaunch
