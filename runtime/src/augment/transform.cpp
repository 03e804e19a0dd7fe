// The draw protocol and the input checks every transform shares (transform.h).
#include "xlaunch/augment/transform.h"

#include <ATen/ops/empty.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include "xlaunch/error.h"

namespace xlaunch::augment {

uint64_t sample_seed(uint64_t seed, int64_t epoch, int64_t id, int position) {
  uint64_t s = mix_seed(seed, static_cast<uint64_t>(epoch));
  s = mix_seed(s, static_cast<uint64_t>(id));
  return mix_seed(s, static_cast<uint64_t>(position));
}

Params Transform::draw(const BatchKey& key, int position, int64_t height, int64_t width) const {
  const int64_t rows = static_cast<int64_t>(key.ids.size());
  const int64_t cols = static_cast<int64_t>(columns().size());
  Params params{at::empty({rows, cols}, at::kDouble), at::empty({rows}, at::kBool)};
  double* values = params.values.data_ptr<double>();
  bool* applied = params.applied.data_ptr<bool>();
  const Options& opt = options();
  // same_on_batch: only row 0 draws; the others copy it.
  const int64_t drawn = opt.same_on_batch ? std::min<int64_t>(rows, 1) : rows;
  for (int64_t i = 0; i < drawn; ++i) {
    Rng rng(sample_seed(key.seed, key.epoch, key.ids[i], position));
    applied[i] = rng.uniform(0, 1) < opt.p;
    sample(rng, height, width, values + i * cols);
  }
  for (int64_t i = drawn; i < rows; ++i) {
    applied[i] = applied[0];
    std::memcpy(values + i * cols, values, sizeof(double) * cols);
  }
  return params;
}

namespace {

std::string shape_of(const at::Tensor& t) {
  std::ostringstream out;
  out << t.sizes();
  return out.str();
}

}  // namespace

void check_apply(const Transform& transform, const at::Tensor& images, const Params& params,
                 const std::vector<int64_t>& channels) {
  const std::string who = transform.name() + ": ";
  if (!images.defined() || images.dim() != 4 || !at::isFloatingType(images.scalar_type())) {
    throw UsageError(who + "the images must be a floating point [B, C, H, W] tensor, got " +
                     (images.defined() ? std::string(c10::toString(images.scalar_type())) + " " + shape_of(images)
                                       : std::string("an undefined tensor")) +
                     "; convert with images.to(at::kFloat) (values in [0, 1]) and add the batch dimension (in a loader: "
                     "make the dataset's get() return float images in [0, 1])");
  }
  if (!channels.empty() && std::find(channels.begin(), channels.end(), images.size(1)) == channels.end()) {
    std::string allowed;
    for (int64_t c : channels) allowed += (allowed.empty() ? "" : " or ") + std::to_string(c);
    throw UsageError(who + "the images have " + std::to_string(images.size(1)) + " channels " + shape_of(images) +
                     "; this transform takes " + allowed);
  }
  const int64_t rows = images.size(0);
  const int64_t cols = static_cast<int64_t>(transform.columns().size());
  const at::Tensor& v = params.values;
  const at::Tensor& a = params.applied;
  if (!v.defined() || !a.defined() || !v.device().is_cpu() || !a.device().is_cpu() ||
      v.scalar_type() != at::kDouble || a.scalar_type() != at::kBool || v.dim() != 2 || v.size(0) != rows ||
      v.size(1) != cols || a.dim() != 1 || a.size(0) != rows) {
    throw UsageError(who + "the parameters must be values [" + std::to_string(rows) + ", " + std::to_string(cols) +
                     "] float64 and applied [" + std::to_string(rows) + "] bool on the CPU (one row per image), got " +
                     (v.defined() ? shape_of(v) : "undefined") + " and " + (a.defined() ? shape_of(a) : "undefined") +
                     "; draw them with draw() for this batch");
  }
}

}  // namespace xlaunch::augment
