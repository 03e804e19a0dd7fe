#include "xlaunch/threaded_communicator.h"

#include <future>

#include "xlaunch/error.h"

namespace xlaunch {

struct ThreadedCommunicator::Item {
  const char* kind;
  uint64_t seq;
  std::function<void()> op;
  std::promise<void> done;
};

namespace {
class FutureWork final : public Work {
 public:
  explicit FutureWork(std::shared_future<void> f) : f_(std::move(f)) {}
  void wait() override { f_.get(); }

 private:
  std::shared_future<void> f_;
};
}  // namespace

void check_cpu_collective_tensor(const at::Tensor& t, const char* what) {
  if (!t.defined()) throw UsageError(std::string(what) + ": the tensor is undefined");
  if (!t.device().is_cpu())
    throw UsageError(std::string(what) + ": the CPU communicator got a tensor on " + t.device().str() +
                     "; CUDA tensors go through the NCCL communicator");
  if (!t.is_contiguous()) throw UsageError(std::string(what) + ": the tensor must be contiguous");
}

ThreadedCommunicator::~ThreadedCommunicator() { stop(); }

void ThreadedCommunicator::start() { thread_ = std::thread([this] { loop(); }); }

void ThreadedCommunicator::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!thread_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void ThreadedCommunicator::set_start_observer(std::function<void(const char*, uint64_t)> fn) {
  std::lock_guard<std::mutex> lk(mu_);
  observer_ = std::move(fn);
}

std::shared_ptr<Work> ThreadedCommunicator::enqueue(const char* kind, std::function<void()> op) {
  auto item = std::make_shared<Item>();
  item->kind = kind;
  item->op = std::move(op);
  auto fut = item->done.get_future().share();
  {
    std::lock_guard<std::mutex> lk(mu_);
    item->seq = issued_++;
    queue_.push_back(item);
  }
  cv_.notify_one();
  return std::make_shared<FutureWork>(std::move(fut));
}

void ThreadedCommunicator::loop() {
  for (;;) {
    std::shared_ptr<Item> item;
    std::function<void(const char*, uint64_t)> observer;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything issued has run
      item = std::move(queue_.front());
      queue_.pop_front();
      observer = observer_;
    }
    try {
      if (observer) observer(item->kind, item->seq);
      item->op();
      item->done.set_value();
    } catch (...) {
      item->done.set_exception(std::current_exception());
    }
  }
}

std::shared_ptr<Work> ThreadedCommunicator::allreduce_async(at::Tensor t, ReduceOp op) {
  check_cpu_collective_tensor(t, "allreduce");
  if (size() == 1) return completed_work();
  return enqueue("allreduce", [this, t, op]() mutable { run_allreduce(t, op); });
}

std::shared_ptr<Work> ThreadedCommunicator::broadcast_async(at::Tensor t, int root) {
  check_cpu_collective_tensor(t, "broadcast");
  if (root < 0 || root >= size())
    throw UsageError("broadcast: root " + std::to_string(root) + " is not a rank of a world of " +
                     std::to_string(size()));
  if (size() == 1) return completed_work();
  return enqueue("broadcast", [this, t, root]() mutable { run_broadcast(t, root); });
}

std::shared_ptr<Work> ThreadedCommunicator::allgather_async(at::Tensor in, at::Tensor out) {
  check_cpu_collective_tensor(in, "allgather");
  check_cpu_collective_tensor(out, "allgather");
  if (out.numel() != in.numel() * size() || out.scalar_type() != in.scalar_type())
    throw UsageError("allgather: the output must hold world_size * input elements of the input's dtype");
  if (size() == 1) {
    out.view(-1).copy_(in.view(-1));
    return completed_work();
  }
  return enqueue("allgather", [this, in, out]() mutable { run_allgather(in, out); });
}

std::shared_ptr<Work> ThreadedCommunicator::barrier_async() {
  if (size() == 1) return completed_work();
  return enqueue("barrier", [this] { run_barrier(); });
}

}  // namespace xlaunch
