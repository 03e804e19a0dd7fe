// A dataset of images whose values are known from their index, for the loader's augmentation tests.
#pragma once

#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/sin.h>
#include <torch/data/datasets/base.h>
#include <torch/data/example.h>

#include <cstdint>
#include <optional>

namespace xlaunch::augment {

// Sample i: a 3 x h x w image of values in [0, 1] known from i; target i.
struct KnownImages : torch::data::datasets::Dataset<KnownImages> {
  KnownImages(int64_t h, int64_t w, size_t n) : h(h), w(w), n(n) {}
  torch::data::Example<> get(size_t index) override {
    const at::Tensor image = (at::sin(at::arange(3 * h * w, at::kFloat) * 0.37 + static_cast<double>(index)) + 1) * 0.5;
    return {image.view({3, h, w}), at::scalar_tensor(static_cast<int64_t>(index), at::kLong)};
  }
  std::optional<size_t> size() const override { return n; }
  int64_t h, w;
  size_t n;
};

}  // namespace xlaunch::augment
