// The model of the stage-3 tests (fsdp_test.cpp with ranks as threads, fsdp_mpi_test.cpp under
// mpirun): a small decoder-like network whose parts are each kind of unit. The root holds the token
// embedding, whose weight the output projection shares (tied), a position table, the final norm
// and a bias; two blocks are entries of a Sequential, one more is declared FullyShard; a frozen
// layer is in no unit. Parameters of odd sizes (13, 17, 27) divide by none of 2, 3 and 4.
#pragma once

#include <ATen/ops/randint.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/linear.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include "xlaunch/fully_shard.h"

namespace xlaunch::test {

constexpr int64_t kVocab = 17, kDim = 13, kSeq = 6;

struct BlockImpl : torch::nn::Module {
  BlockImpl() {
    ln = register_module("ln", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kDim})));
    up = register_module("up", torch::nn::Linear(kDim, 27));
    down = register_module("down", torch::nn::Linear(27, kDim));
  }
  at::Tensor forward(const at::Tensor& x) { return x + down(torch::nn::functional::gelu(up(ln(x)))); }
  torch::nn::LayerNorm ln{nullptr};
  torch::nn::Linear up{nullptr}, down{nullptr};
};
TORCH_MODULE(Block);

struct NetImpl : torch::nn::Module {
  NetImpl() {
    tok = register_module("tok", torch::nn::Embedding(kVocab, kDim));
    pos = register_parameter("pos", torch::randn({kSeq, kDim}) * 0.1);
    blocks = register_module("blocks", torch::nn::Sequential(Block(), Block()));
    extra = register_module("extra", xlaunch::FullyShard<Block>());
    frozen = register_module("frozen", torch::nn::Linear(kDim, kDim));
    for (auto& p : frozen->parameters()) p.requires_grad_(false);
    lnf = register_module("lnf", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kDim})));
    head_bias = register_parameter("head_bias", torch::zeros({kVocab}));
  }
  // Logits [B, T, V]: the output projection is the embedding's weight (tied, in the root).
  at::Tensor forward(const at::Tensor& idx) {
    at::Tensor x = tok(idx) + pos;
    x = blocks->forward(x);
    x = extra(x);
    x = frozen(x);
    return torch::nn::functional::linear(lnf(x), tok->weight, head_bias);
  }
  torch::nn::Embedding tok{nullptr};
  at::Tensor pos, head_bias;
  torch::nn::Sequential blocks{nullptr};
  xlaunch::FullyShard<Block> extra{nullptr};
  torch::nn::Linear frozen{nullptr};
  torch::nn::LayerNorm lnf{nullptr};
};
TORCH_MODULE(Net);

// Rank r's token batch of step s (4 sequences of kSeq + 1 tokens: inputs and next-token targets).
inline at::Tensor tokens(int rank, int step) {
  auto gen = at::detail::createCPUGenerator(300 + 101 * step + rank);
  return at::randint(0, kVocab, {4, kSeq + 1}, gen, at::kLong);
}

}  // namespace xlaunch::test
