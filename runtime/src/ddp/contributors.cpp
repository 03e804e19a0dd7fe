#include "ddp/contributors.h"

#include <ATen/core/grad_mode.h>

#include "check.h"

namespace xlaunch {

Contributors::Contributors(at::Tensor elements, int rank)
    : elements_(std::move(elements)), rank_(rank), count_(static_cast<int>(elements_.numel())) {
  XLAUNCH_ASSERT(rank_ >= 0 && rank_ < elements_.numel(), "one contributor element per rank");
}

void Contributors::write(bool contributing) {
  at::NoGradGuard no_grad;
  elements_.zero_();
  if (contributing) elements_[rank_].fill_(1);
}

void Contributors::read() {
  at::NoGradGuard no_grad;
  // In double on the host: element r is 1/W or 0 (in 16 bits, 1/W rounded: still far above 1/(2W)).
  const at::Tensor host = elements_.to(at::kCPU, at::kDouble);
  const double* v = host.data_ptr<double>();
  const double half = 0.5 / static_cast<double>(world());
  int count = 0, first = -1;
  for (int r = 0; r < world(); ++r) {
    if (v[r] <= half) continue;
    ++count;
    if (first < 0) first = r;
  }
  count_ = count;
  if (first >= 0) first_ = first;
}

void Contributors::reset() {
  count_ = world();
  first_ = 0;
}

}  // namespace xlaunch
