#include "track/histograms.h"

#include <ATen/Context.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/stack.h>

namespace xlaunch::track {

Histogram histogram_of(const std::string& tag, const at::Tensor& t, int bins) {
  Histogram h;
  h.tag = tag;
  at::Tensor x = t.detach().reshape({-1}).to(at::kDouble);
  x = x.masked_select(at::isfinite(x));
  if (x.numel() == 0) return h;
  // One copy to the host for the summary, one for the counts.
  const at::Tensor summary = at::stack({x.min(), x.max(), x.sum(), (x * x).sum()}).cpu();
  const double* s = summary.data_ptr<double>();
  h.min = s[0], h.max = s[1], h.sum = s[2], h.sum_squares = s[3];
  h.num = static_cast<double>(x.numel());
  if (h.max == h.min) {  // one value: one bucket holding every element
    h.bucket_limit = {h.max};
    h.bucket = {h.num};
    return h;
  }
  // histc has no deterministic CUDA implementation: under deterministic: true the counts are made
  // on the host (a copy of the tensor, at a step that already synchronises), so logging histograms
  // never fails in an operation the user did not call.
  const bool on_host = x.is_cuda() && at::globalContext().deterministicAlgorithms();
  const at::Tensor counts = (on_host ? x.cpu() : x).histc(bins, h.min, h.max).cpu();
  const double* c = counts.data_ptr<double>();
  const double width = (h.max - h.min) / bins;
  for (int i = 0; i < bins; ++i) {
    h.bucket_limit.push_back(i + 1 == bins ? h.max : h.min + width * (i + 1));
    h.bucket.push_back(c[i]);
  }
  return h;
}

}  // namespace xlaunch::track
