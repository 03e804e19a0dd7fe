#include "ddp/grad_capture.h"

#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>

#include "check.h"

namespace xlaunch {

namespace {
// This thread's captures, oldest first. A capture destroyed on another thread (a misuse) is only
// marked dead there and dropped here at the next allocation, never dereferenced.
thread_local std::vector<std::shared_ptr<const GradCapture::State>> t_captures;
}  // namespace

// The process's CPU allocator while captures may run: the previous allocator for everything but
// a capturing thread's gradient-sized allocations.
class CaptureAllocator final : public c10::Allocator {
 public:
  explicit CaptureAllocator(c10::Allocator* base) : base_(base) {}

  c10::DataPtr allocate(size_t n) override {
    if (!t_captures.empty()) {
      t_captures.erase(std::remove_if(t_captures.begin(), t_captures.end(), [](const auto& c) { return !c->alive; }),
                       t_captures.end());
      for (auto it = t_captures.rbegin(); it != t_captures.rend(); ++it) {
        c10::DataPtr p = (*it)->try_allocate(n);
        if (p) return p;
      }
    }
    return base_->allocate(n);
  }
  c10::DeleterFnPtr raw_deleter() const override { return base_->raw_deleter() ? &raw_delete : nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    base_->copy_data(dest, src, count);
  }

  static CaptureAllocator* instance() {
    static CaptureAllocator* a = [] {
      auto* alloc = new CaptureAllocator(c10::GetCPUAllocator());
      // Priority 0 replaces LibTorch's default allocator, not one a library installed deliberately
      // with a higher priority (active() then says so).
      c10::SetCPUAllocator(alloc, /*priority=*/0);
      return alloc;
    }();
    return a;
  }
  c10::Allocator* base() const { return base_; }

 private:
  // raw_allocate() hands out data == context pointers from either source; route each back.
  static void raw_delete(void* p) {
    if (!free_pool_block(p)) instance()->base()->raw_deleter()(p);
  }
  c10::Allocator* base_;
};

GradCapture::GradCapture(std::vector<size_t> sizes, std::vector<SharedPool*> pools)
    : state_(std::make_shared<State>()) {
  std::sort(sizes.begin(), sizes.end());
  state_->sizes = std::move(sizes);
  state_->pools = std::move(pools);
  CaptureAllocator::instance();
  t_captures.push_back(state_);
}

GradCapture::~GradCapture() {
  state_->alive = false;
  auto it = std::find(t_captures.begin(), t_captures.end(), state_);
  if (it != t_captures.end()) t_captures.erase(it);
}

bool GradCapture::active() { return c10::GetCPUAllocator() == CaptureAllocator::instance(); }

c10::DataPtr GradCapture::State::try_allocate(size_t n) const {
  if (!std::binary_search(sizes.begin(), sizes.end(), n)) return {};
  for (SharedPool* pool : pools) {
    c10::DataPtr p = pool->allocate(n);
    if (p) return p;
  }
  return {};
}

}  // namespace xlaunch
