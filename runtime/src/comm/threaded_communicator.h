// Base for CPU communicators whose every collective runs on the communication thread (comm_thread.h):
// MPI and in-process. Subclasses implement the blocking run_* operations, which are only ever
// called on that thread.
#pragma once

#include "comm/comm_thread.h"

namespace xlaunch {

class ThreadedCommunicator : public Communicator {
 public:
  ~ThreadedCommunicator() override { thread_.stop(); }

  std::shared_ptr<Work> allreduce_async(at::Tensor t, ReduceOp op) override;
  std::shared_ptr<Work> broadcast_async(at::Tensor t, int root) override;
  std::shared_ptr<Work> allgather_async(at::Tensor in, at::Tensor out) override;
  std::shared_ptr<Work> barrier_async() override;

  CommThread& comm_thread() { return thread_; }

 protected:
  // Subclasses call start() at the end of their constructor and stop() at the start of their
  // destructor (the thread must not outlive the subclass's state).
  void start() { thread_.start(); }
  void stop() { thread_.stop(); }

  virtual void run_allreduce(at::Tensor& t, ReduceOp op) = 0;
  virtual void run_broadcast(at::Tensor& t, int root) = 0;
  virtual void run_allgather(const at::Tensor& in, at::Tensor& out) = 0;
  virtual void run_barrier() = 0;

 private:
  CommThread thread_;
};

// Checks the communicator's preconditions on a tensor: CPU, contiguous, a supported dtype.
void check_cpu_collective_tensor(const at::Tensor& t, const char* what);

}  // namespace xlaunch
