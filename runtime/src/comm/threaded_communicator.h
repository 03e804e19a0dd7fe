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
  std::shared_ptr<Work> allgather_async(at::Tensor in, at::Tensor out) override;
  std::shared_ptr<Work> barrier_async() override;

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

 private:
  std::shared_ptr<CommThread> thread_;
  bool owns_thread_ = false;
};

// Checks the communicator's preconditions on a tensor: CPU, contiguous, a supported dtype.
void check_cpu_collective_tensor(const at::Tensor& t, const char* what);

}  // namespace xlaunch
