// The Fashion-MNIST CNN of train_fashion_mnist.cpp (conv-BN-ReLU, pool, conv-BN-ReLU, pool, linear),
// in a header of its own so that the operator profile's reference test (tests/profile/
// op_profile_job.cpp, against the same network in Python) profiles this very model.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/pooling.h>
#include <torch/nn/pimpl.h>

// conv 3x3 (no bias: BatchNorm's shift replaces it) -> BatchNorm -> ReLU.
struct ConvBlockImpl : torch::nn::Module {
  ConvBlockImpl(int64_t in, int64_t out)
      : conv(register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).padding(1).bias(false)))),
        bn(register_module("bn", torch::nn::BatchNorm2d(out))) {}
  torch::Tensor forward(const torch::Tensor& x) { return torch::relu(bn(conv(x))); }
  torch::nn::Conv2d conv;
  torch::nn::BatchNorm2d bn;
};
TORCH_MODULE(ConvBlock);

struct FashionCnnImpl : torch::nn::Module {
  FashionCnnImpl()
      : features(register_module("features", torch::nn::Sequential(ConvBlock(1, kWidth1), torch::nn::MaxPool2d(2),
                                                                     ConvBlock(kWidth1, kWidth2), torch::nn::MaxPool2d(2)))),
        classifier(register_module("classifier", torch::nn::Linear(kWidth2 * 7 * 7, 10))) {}

  torch::Tensor forward(torch::Tensor x) {
    x = (x - 0.2860) / 0.3530;  // the training set's mean and standard deviation
    return classifier(features->forward(x).flatten(1));
  }

  static constexpr int64_t kWidth1 = 16, kWidth2 = 32;
  torch::nn::Sequential features;
  torch::nn::Linear classifier;
};
TORCH_MODULE(FashionCnn);
