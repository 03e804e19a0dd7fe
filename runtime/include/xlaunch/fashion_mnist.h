// Fashion-MNIST (Zalando's 28x28 grey clothing images, 10 classes) from the IDX files of Debian's
// dataset-fashion-mnist package, read with zlib. A LibTorch dataset, so it plugs into
// xlaunch::Loader and torch::data alike, with MNIST's conventions: get(i) returns an image as
// float [1, 28, 28] in [0, 1] and its label as an int64 scalar in 0..9.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/data/datasets/base.h>
#include <torch/data/example.h>

#include <cstddef>
#include <optional>
#include <string>

namespace xlaunch {

class FashionMnist : public torch::data::datasets::Dataset<FashionMnist> {
 public:
  enum class Split { Train, Test };  // 60000 and 10000 samples
  static constexpr const char* kDefaultRoot = "/usr/share/datasets/fashion-mnist";

  // Reads <root>/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz. Throws UsageError when a file
  // is missing (naming the package to install) or malformed (naming the file and the problem).
  explicit FashionMnist(Split split, const std::string& root = kDefaultRoot);

  torch::data::Example<> get(size_t index) override;
  std::optional<size_t> size() const override;

  const at::Tensor& images() const { return images_; }    // uint8 [N, 28, 28]
  const at::Tensor& targets() const { return targets_; }  // int64 [N]
  static const char* class_name(int64_t label);           // "T-shirt/top", ..., "Ankle boot"

 private:
  at::Tensor images_;
  at::Tensor targets_;
};

// One IDX file, gzip-compressed or not: its dims (big-endian int32 each) and uint8 payload, as a
// uint8 tensor of those dims. Throws UsageError for a missing, truncated or non-uint8 file.
at::Tensor read_idx_file(const std::string& path);

}  // namespace xlaunch
