// Small models and data shared by the DDP tests. Data is built from (seed, rank) so every rank can
// compute what one process would get on the concatenated batch.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/loss.h>
#include <torch/utils.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>

namespace xlaunch::test {

struct MlpImpl : torch::nn::Module {
  explicit MlpImpl(int in = 20, int hidden = 32, int out = 10, bool with_unused = false) {
    fc1 = register_module("fc1", torch::nn::Linear(in, hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, hidden));
    fc3 = register_module("fc3", torch::nn::Linear(hidden, out));
    if (with_unused) unused = register_module("unused", torch::nn::Linear(hidden, out));
  }
  at::Tensor forward(const at::Tensor& x) {
    auto h = torch::relu(fc1(x));
    h = torch::relu(fc2(h));
    return fc3(h);
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr}, unused{nullptr};
};
TORCH_MODULE(Mlp);

// conv -> BatchNorm -> ReLU blocks; a convolution followed by BatchNorm has no bias.
struct ConvNetImpl : torch::nn::Module {
  ConvNetImpl() {
    c1 = register_module("c1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3).bias(false)));
    b1 = register_module("b1", torch::nn::BatchNorm2d(4));
    c2 = register_module("c2", torch::nn::Conv2d(torch::nn::Conv2dOptions(4, 8, 3).bias(false)));
    b2 = register_module("b2", torch::nn::BatchNorm2d(8));
    fc = register_module("fc", torch::nn::Linear(8 * 4 * 4, 10));
  }
  at::Tensor forward(const at::Tensor& x) {
    auto h = torch::relu(b1(c1(x)));
    h = torch::relu(b2(c2(h)));
    return fc(h.flatten(1));
  }
  torch::nn::Conv2d c1{nullptr}, c2{nullptr};
  torch::nn::BatchNorm2d b1{nullptr}, b2{nullptr};
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(ConvNet);

struct Batch {
  at::Tensor x, y;
};

// Rank r's batch of step s: the same on every process (and thread) that asks. A generator of its
// own, so ranks running as threads do not race on the global one.
inline Batch mlp_batch(int rank, int step, int batch = 8, int in = 20) {
  auto gen = at::detail::createCPUGenerator(1000 + 97 * step + rank);
  return {at::randn({batch, in}, gen), at::randint(0, 10, {batch}, gen, at::kLong)};
}
inline Batch conv_batch(int rank, int step, int batch = 6) {
  auto gen = at::detail::createCPUGenerator(5000 + 97 * step + rank);
  return {at::randn({batch, 1, 8, 8}, gen), at::randint(0, 10, {batch}, gen, at::kLong)};
}
inline Batch concat(const std::vector<Batch>& parts) {
  std::vector<at::Tensor> xs, ys;
  for (const auto& p : parts) {
    xs.push_back(p.x);
    ys.push_back(p.y);
  }
  return {at::cat(xs), at::cat(ys)};
}

inline at::Tensor loss_of(const at::Tensor& logits, const at::Tensor& y) {
  return torch::nn::functional::cross_entropy(logits, y);
}

// Copies parameters and buffers of `from` into `to` (same architecture).
inline void copy_state(torch::nn::Module& to, const torch::nn::Module& from) {
  torch::NoGradGuard g;
  auto dst = to.named_parameters();
  for (const auto& item : from.named_parameters()) dst[item.key()].copy_(item.value());
  auto dbuf = to.named_buffers();
  for (const auto& item : from.named_buffers()) dbuf[item.key()].copy_(item.value());
}

// max |a-b| / max(|b|, tiny): relative error of a against the reference b.
inline double rel_err(const at::Tensor& a, const at::Tensor& b) {
  const double scale = std::max(b.abs().max().item<double>(), 1e-12);
  return (a - b).abs().max().item<double>() / scale;
}

}  // namespace xlaunch::test
