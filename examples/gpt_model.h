// The GPT-style decoder of examples/train_gpt.cpp and scripts/bench/fsdp.sh: token and position
// embeddings, pre-norm blocks of causal self-attention and a 4x MLP, a final norm, and the output
// projection tied to the token embedding. Each block is an xlaunch::FullyShard<Block>, a unit at
// ddp.zero_stage 3; the embeddings and the final norm are the root unit. Byte-level: 256 tokens.
#pragma once

#include <ATen/ops/scaled_dot_product_attention.h>
#include <torch/nn/functional/linear.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "xlaunch/fully_shard.h"

namespace xlaunch::examples {

struct BlockImpl : torch::nn::Module {
  BlockImpl(int64_t dim, int64_t heads) : heads(heads) {
    ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})));
    qkv = register_module("qkv", torch::nn::Linear(dim, 3 * dim));
    proj = register_module("proj", torch::nn::Linear(dim, dim));
    ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})));
    up = register_module("up", torch::nn::Linear(dim, 4 * dim));
    down = register_module("down", torch::nn::Linear(4 * dim, dim));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const int64_t b = x.size(0), t = x.size(1), d = x.size(2);
    auto parts = qkv(ln1(x)).view({b, t, 3, heads, d / heads}).permute({2, 0, 3, 1, 4}).unbind(0);
    const torch::Tensor att = at::scaled_dot_product_attention(parts[0], parts[1], parts[2], {}, 0.0, /*is_causal=*/true);
    torch::Tensor y = x + proj(att.transpose(1, 2).reshape({b, t, d}));
    return y + down(torch::gelu(up(ln2(y))));
  }
  int64_t heads;
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  torch::nn::Linear qkv{nullptr}, proj{nullptr}, up{nullptr}, down{nullptr};
};
TORCH_MODULE(Block);

struct GptImpl : torch::nn::Module {
  GptImpl(int64_t dim, int64_t layers, int64_t heads, int64_t seq) {
    tok = register_module("tok", torch::nn::Embedding(256, dim));
    pos = register_parameter("pos", torch::randn({seq, dim}) * 0.01);
    for (int64_t i = 0; i < layers; ++i)
      blocks.push_back(register_module("h" + std::to_string(i), xlaunch::FullyShard<Block>(dim, heads)));
    lnf = register_module("lnf", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})));
    torch::NoGradGuard no_grad;
    tok->weight.normal_(0, 0.02);
  }
  // Logits [B, T, 256]; the output projection is the token embedding (tied, in the root unit).
  torch::Tensor forward(const torch::Tensor& idx) {
    torch::Tensor x = tok(idx) + pos.narrow(0, 0, idx.size(1));
    for (auto& block : blocks) x = block(x);
    return torch::nn::functional::linear(lnf(x), tok->weight);
  }
  torch::nn::Embedding tok{nullptr};
  torch::Tensor pos;
  std::vector<xlaunch::FullyShard<Block>> blocks;
  torch::nn::LayerNorm lnf{nullptr};
};
TORCH_MODULE(Gpt);

}  // namespace xlaunch::examples
