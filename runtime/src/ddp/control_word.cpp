#include "ddp/control_word.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include "check.h"

namespace xlaunch {

ControlWord::ControlWord(at::Tensor element, bool deferred) : element_(std::move(element)), deferred_(deferred) {
  XLAUNCH_ASSERT(element_.numel() == 1, "the control element is one element");
  if (!deferred_) return;
  const bool on_device = !element_.is_cpu();
  copy_ = at::empty({1}, element_.options().device(at::kCPU).pinned_memory(on_device));
  // The device-generic event (c10's), so this file needs no CUDA headers.
  if (on_device) copied_ = std::make_unique<c10::Event>(element_.device().type());
}

ControlWord::~ControlWord() = default;

void ControlWord::write() {
  at::NoGradGuard no_grad;
  element_.fill_(bit_.load() ? 1 : 0);
}

void ControlWord::read(int64_t sync_steps) {
  if (raised_at_ >= 0) return;  // agreed once; nothing more to learn
  at::NoGradGuard no_grad;
  if (!deferred_) {
    if (element_.item<double>() > 0) raised_at_ = sync_steps;
    return;
  }
  if (copy_pending_) {
    if (copied_) copied_->synchronize();  // recorded a synced backward ago
    copy_pending_ = false;
    if (copy_.item<double>() > 0) {
      raised_at_ = sync_steps;
      return;
    }
  }
  // On the stream the bucket's wait ordered after its collective: the device's current one.
  copy_.copy_(element_, /*non_blocking=*/true);
  if (copied_) copied_->record(c10::impl::VirtualGuardImpl(element_.device().type()).getStream(element_.device()));
  copy_pending_ = true;
}

}  // namespace xlaunch
