// Base for CPU communicators whose every collective runs on the communication thread (comm_thread.h):
// MPI and in-process. Subclasses implement the blocking run_* operations, which are only ever
// called on that thread. A communicator may own its thread, or share another's (an MPI
// sub-communicator shares the world's, so that every MPI call of the process stays on one thread).
#pragma once

#include "comm/comm_thread.h"

namespace xlaunch {

class ThreadedCommunicator : public Communicator {
 public:
  ~ThreadedCommunicator() override { stop(); }

  std::shared_ptr<Work> allreduce_async(at::Tensor t, ReduceOp op) override;
  std::shared_ptr<Work> broadcast_async(at::Tensor t, int root) override;
  // `in` may be this rank's chunk of `out` (an allgather in place, as sharded data parallelism
  // gathers updated shards into the full buffer); any other overlap is a UsageError.
  std::shared_ptr<Work> allgather_async(at::Tensor in, at::Tensor out) override;
  std::shared_ptr<Work> barrier_async() override;
  // `out` may be this rank's chunk of `in` (reduced in place); any other overlap is a UsageError.
  std::shared_ptr<Work> reduce_scatter_async(at::Tensor in, at::Tensor out, ReduceOp op) override;

  CommThread& comm_thread() { return *thread_; }

 protected:
  // Its own thread.
  ThreadedCommunicator() : thread_(std::make_shared<CommThread>()), owns_thread_(true) {}
  // Another communicator's thread, which the owner starts and stops.
  explicit ThreadedCommunicator(std::shared_ptr<CommThread> shared) : thread_(std::move(shared)) {}

  // Subclasses call start() at the end of their constructor and stop() at the start of their
  // destructor (the thread must not outlive the subclass's state). On a shared thread, stop()
  // waits until what this communicator issued has run, and leaves the thread to its owner.
  void start() {
    if (owns_thread_) thread_->start();
  }
  void stop() {
    if (owns_thread_) thread_->stop();
    else thread_->run_local([] {});
  }
  const std::shared_ptr<CommThread>& shared_thread() const { return thread_; }

  virtual void run_allreduce(at::Tensor& t, ReduceOp op) = 0;
  virtual void run_broadcast(at::Tensor& t, int root) = 0;
  virtual void run_allgather(const at::Tensor& in, at::Tensor& out) = 0;
  virtual void run_barrier() = 0;
  // Arguments checked; size() > 1; op already through reduce_op_for (booleans arrive as Max).
  virtual void run_reduce_scatter(at::Tensor& in, at::Tensor& out, ReduceOp op) = 0;

 private:
  std::shared_ptr<CommThread> thread_;
  bool owns_thread_ = false;
};

// Checks the communicator's preconditions on a tensor: CPU, contiguous, a supported dtype.
void check_cpu_collective_tensor(const at::Tensor& t, const char* what);

// `part` (n elements) may lie apart from `whole` (size() * n elements) or be exactly chunk `rank`
// of it; any other overlap throws UsageError naming the collective (`what`) and both arguments.
void check_chunk_overlap(const at::Tensor& whole, const at::Tensor& part, int rank, const char* what,
                         const char* whole_name, const char* part_name);

}  // namespace xlaunch
