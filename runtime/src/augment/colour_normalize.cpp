// Normalize (colour.h): kornia.augmentation.Normalize, (x - mean[c]) / std[c].
#include <ATen/ops/sub.h>
#include <ATen/ops/div.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/where.h>

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
  return at::tensor(v, at::kDouble).to(images.options()).view({1, -1, 1, 1});
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
  // `applied` is on the CPU (check_apply): counting it waits for no device.
  const int64_t applied = params.applied.sum().item<int64_t>();
  if (applied == 0) return images.clone();
  const at::Tensor out = at::div(at::sub(images, per_channel(mean_, images)), per_channel(std_, images));
  if (applied == images.size(0)) return out;
  return at::where(params.applied.to(images.device()).view({-1, 1, 1, 1}), out, images);
}

}  // namespace xlaunch::augment
