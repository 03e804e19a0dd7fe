#include "comm/comm_thread.h"

#include <future>

namespace xlaunch {

struct CommThread::Item {
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

void CommThread::start() { thread_ = std::thread([this] { loop(); }); }

void CommThread::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!thread_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void CommThread::set_start_observer(std::function<void(const char*, uint64_t)> fn) {
  std::lock_guard<std::mutex> lk(mu_);
  observer_ = std::move(fn);
}

std::shared_ptr<Work> CommThread::enqueue(const char* kind, std::function<void()> op) {
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

void CommThread::loop() {
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

}  // namespace xlaunch
