// The benchmark MLP: 784-H-H-10 with ReLU, the model of peers/torch_ddp_mlp.py. Shared by the
// benchmarks and the tests that train it, so all of them measure and check the same network.
// Only the module headers: every includer pays for these, and torch's full API costs ~30 s.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <cstdint>

namespace xlaunch::bench {

// Layers are registered (and so initialised from the global generator) in forward order, as
// torch.nn.Sequential does in the peer.
struct MlpImpl : torch::nn::Module {
  explicit MlpImpl(int64_t hidden)
      : l1(register_module("l1", torch::nn::Linear(784, hidden))),
        l2(register_module("l2", torch::nn::Linear(hidden, hidden))),
        l3(register_module("l3", torch::nn::Linear(hidden, 10))) {}
  at::Tensor forward(const at::Tensor& x) { return l3(l2(l1(x).relu()).relu()); }
  torch::nn::Linear l1, l2, l3;
};
TORCH_MODULE(Mlp);

}  // namespace xlaunch::bench
