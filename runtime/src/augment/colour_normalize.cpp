// Normalize (colour.h): kornia.augmentation.Normalize, (x - mean[c]) / std[c].
#include <ATen/ops/sub.h>
#include <ATen/ops/div.h>
#include <ATen/ops/tensor.h>

#include <vector>

#include "augment/warp.h"
#include "xlaunch/augment/colour.h"
#include "xlaunch/error.h"

namespace xlaunch::augment {
namespace {

std::string listed(const std::vector<double>& v) {
  std::string out;
  for (double x : v) out += (out.empty() ? "" : ", ") + std::to_string(x);
  return "(" + out + ")";
}

// [1, C, 1, 1] (or [1, 1, 1, 1]) in the images' dtype and device, for broadcasting.
at::Tensor per_channel(const std::vector<double>& v, const at::Tensor& images) {
  return detail::to_device(at::tensor(v, at::kDouble), images.device(), images.scalar_type()).view({1, -1, 1, 1});
}

[[maybe_unused]] const bool kRegistered =
    (register_transform("Normalize", [](const Args& a) { return Normalize::from_args(a); }), true);

}  // namespace

Normalize::Normalize(std::vector<double> mean, std::vector<double> std, double p)
    : mean_(std::move(mean)), std_(std::move(std)) {
  if (mean_.empty() || std_.empty()) {
    throw UsageError("Normalize: give mean and std, one number each or one per channel (got " +
                     std::to_string(mean_.size()) + " and " + std::to_string(std_.size()) + " numbers)");
  }
  for (double s : std_) {
    if (s == 0) throw UsageError("Normalize: std " + listed(std_) + " has a 0, which would divide by zero");
  }
  options_.p = p;
  options_.same_on_batch = true;  // Kornia's Normalize gates the whole batch with one draw.
}

std::shared_ptr<Normalize> Normalize::from_args(const Args& args) {
  const ArgReader read("Normalize", args, {"mean", "std"});
  for (const char* arg : {"mean", "std"}) {
    if (!read.has(arg)) read.fail(arg, {}, "give it: one number for every channel, or one per channel");
  }
  if (read.has("same_on_batch")) {
    read.fail("same_on_batch", read.values("same_on_batch", {}, 0, 1),
              "Normalize always gates the whole batch with one draw, as Kornia's does (it has no same_on_batch)");
  }
  return std::make_shared<Normalize>(read.values("mean", {}, 1, 1024), read.values("std", {}, 1, 1024),
                                     read.options(1.0).p);
}

at::Tensor Normalize::apply(const at::Tensor& images, const Params& params) const {
  check_apply(*this, images, params);
  const int64_t channels = images.size(1);
  for (const auto* v : {&mean_, &std_}) {
    if (v->size() != 1 && static_cast<int64_t>(v->size()) != channels) {
      throw UsageError("Normalize: " + std::string(v == &mean_ ? "mean " : "std ") + listed(*v) + " has " +
                       std::to_string(v->size()) + " numbers, and the images have " + std::to_string(channels) +
                       " channels; give one number, or one per channel");
    }
  }
  return detail::apply_rows(images, params.applied, [&](const at::Tensor& rows, const std::vector<int64_t>&) {
    return at::div(at::sub(rows, per_channel(mean_, rows)), per_channel(std_, rows));
  });
}

}  // namespace xlaunch::augment
