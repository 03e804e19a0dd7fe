#include "comm/flat.h"

#include <ATen/core/grad_mode.h>

namespace xlaunch {

void flatten_into(const std::vector<at::Tensor>& ts, const at::Tensor& flat) {
  at::NoGradGuard no_grad;
  int64_t offset = 0;
  for (const auto& t : ts) {
    flat.narrow(0, offset, t.numel()).copy_(t.reshape({-1}));
    offset += t.numel();
  }
}

void unflatten_into(const at::Tensor& flat, const std::vector<at::Tensor>& ts) {
  at::NoGradGuard no_grad;
  int64_t offset = 0;
  for (const auto& t : ts) {
    t.detach().copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

}  // namespace xlaunch
