#include "comm/comm_thread.h"

#include <c10/util/Exception.h>

#include <future>

#include "profile/step_clock.h"
#include "profile/sync_count.h"
#include "profile/trace.h"
#include "watch/watchdog.h"

namespace xlaunch {

struct CommThread::Item {
  const char* kind;  // nullptr: a local function (run_local), not logged
  uint64_t seq;
  uint64_t bytes = 0;
  int bucket = -1;
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

CollectiveInfo CollectiveInfo::of(const char* op, const at::Tensor& t) {
  return t.defined() ? CollectiveInfo{op, t.scalar_type(), t.numel()} : CollectiveInfo{op};
}

CollectiveInfo CollectiveInfo::of(const char* op, const std::vector<at::Tensor>& ts) {
  CollectiveInfo info{op};
  if (!ts.empty()) info.dtype = ts.front().scalar_type();
  for (const auto& t : ts) info.numel += t.numel();
  return info;
}

const char* dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kLong: return "int64";
    case at::kInt: return "int32";
    case at::kShort: return "int16";
    case at::kChar: return "int8";
    case at::kByte: return "uint8";
    case at::kBool: return "bool";
    default: return c10::toString(t);
  }
}

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

std::shared_ptr<Work> CommThread::enqueue(const CollectiveInfo& info, std::function<void()> op) {
  auto item = std::make_shared<Item>();
  item->kind = info.op;
  item->op = std::move(op);
  auto fut = item->done.get_future().share();
  {
    std::lock_guard<std::mutex> lk(mu_);
    // Numbered under the lock: the log's order is the queue's.
    item->seq = watch::issued(info.op, dtype_name(info.dtype), info.numel, static_cast<int>(c10::elementSize(info.dtype)));
    item->bytes = static_cast<uint64_t>(info.numel) * c10::elementSize(info.dtype);
    item->bucket = watch::current_bucket();
    queue_.push_back(item);
  }
  cv_.notify_one();
  return std::make_shared<FutureWork>(std::move(fut));
}

void CommThread::run_local(const std::function<void()>& fn) {
  auto item = std::make_shared<Item>();
  item->kind = nullptr;
  item->op = fn;
  auto fut = item->done.get_future();
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!thread_.joinable() || stopping_) {
      item.reset();
    } else {
      queue_.push_back(item);
    }
  }
  if (!item) return fn();  // no thread: nothing else can be calling MPI from it
  cv_.notify_one();
  fut.get();
}

void CommThread::loop() {
  const profile::syncs::CountedThread counted("the communication thread");  // debug: its syncs are the step's too
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
    if (!item->kind) {  // run_local: in order, unlogged
      try {
        item->op();
        item->done.set_value();
      } catch (...) {
        item->done.set_exception(std::current_exception());
      }
      continue;
    }
    try {
      watch::started(item->seq);
      if (observer) observer(item->kind, item->seq);
      const uint64_t t0 = profile::monotonic_ns();
      item->op();
      watch::finished(item->seq, true);
      profile::collective_done(item->bytes);
      if (profile::trace::active())
        profile::trace::span(profile::trace::kCommThread, item->kind, t0, profile::monotonic_ns() - t0,
                             {{"seq", static_cast<int64_t>(item->seq)},
                              {"bucket", static_cast<int64_t>(item->bucket)},
                              {"bytes", static_cast<int64_t>(item->bytes)}});
      item->done.set_value();
    } catch (...) {
      watch::finished(item->seq, false);
      item->done.set_exception(std::current_exception());
    }
  }
}

}  // namespace xlaunch
