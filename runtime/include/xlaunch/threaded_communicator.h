// Base for CPU communicators: one communication thread owns every collective call, so collectives
// run in the order they were issued and the issuing thread (backward, the optimizer) keeps
// computing while a bucket is reduced. Subclasses implement the blocking run_* operations, which
// are only ever called on that thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "xlaunch/communicator.h"

namespace xlaunch {

class ThreadedCommunicator : public Communicator {
 public:
  ~ThreadedCommunicator() override;

  std::shared_ptr<Work> allreduce_async(at::Tensor t, ReduceOp op) override;
  std::shared_ptr<Work> broadcast_async(at::Tensor t, int root) override;
  std::shared_ptr<Work> allgather_async(at::Tensor in, at::Tensor out) override;
  std::shared_ptr<Work> barrier_async() override;

  // Observability for tests and profiling: called on the communication thread as each collective
  // starts, with its kind ("allreduce", ...) and its sequence number.
  void set_start_observer(std::function<void(const char*, uint64_t)> fn);

 protected:
  // Subclasses call start() at the end of their constructor and stop() at the start of their
  // destructor (the thread must not outlive the subclass's state).
  void start();
  void stop();

  virtual void run_allreduce(at::Tensor& t, ReduceOp op) = 0;
  virtual void run_broadcast(at::Tensor& t, int root) = 0;
  virtual void run_allgather(const at::Tensor& in, at::Tensor& out) = 0;
  virtual void run_barrier() = 0;

  // Runs op on the communication thread after everything issued before it.
  std::shared_ptr<Work> enqueue(const char* kind, std::function<void()> op);

 private:
  void loop();

  struct Item;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Item>> queue_;
  bool stopping_ = false;
  uint64_t issued_ = 0;
  std::function<void(const char*, uint64_t)> observer_;
  std::thread thread_;
};

// Checks the communicator's preconditions on a tensor: CPU, contiguous, a supported dtype.
void check_cpu_collective_tensor(const at::Tensor& t, const char* what);

}  // namespace xlaunch
