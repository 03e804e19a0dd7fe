// Lion (Chen et al., 2023, "Symbolic Discovery of Optimization Algorithms"), as a LibTorch
// optimizer: one momentum buffer per parameter and a step of the same size for every element, the
// sign of an interpolation of the momentum and the gradient. LibTorch has no Lion; this one is
// written as LibTorch's optimizers are (options per parameter group, state objects, save/load), so
// acc.prepare, ZeRO, checkpoints and the fused step (optimizer.fused) take it like AdamW.
//
// Per parameter, with lr, betas (b1, b2) and weight_decay of its group (PyTorch ports' defaults:
// 1e-4, (0.9, 0.99), 0):
//   p      *= 1 - lr * weight_decay                 (decoupled, as AdamW)
//   update  = sign(b1 * exp_avg + (1 - b1) * grad)   (sign(0) = 0)
//   p      -= lr * update
//   exp_avg = b2 * exp_avg + (1 - b2) * grad
// Use a learning rate 3-10x smaller than AdamW's, and a weight decay as many times larger.
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

#include <tuple>
#include <vector>

namespace xlaunch::optim {

struct LionOptions : public torch::optim::OptimizerCloneableOptions<LionOptions> {
  LionOptions(double lr = 1e-4);  // NOLINT: implicit, as LibTorch's options
  TORCH_ARG(double, lr) = 1e-4;
  typedef std::tuple<double, double> betas_t;
  TORCH_ARG(betas_t, betas) = std::make_tuple(0.9, 0.99);
  TORCH_ARG(double, weight_decay) = 0;

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
  friend bool operator==(const LionOptions& lhs, const LionOptions& rhs);
  double get_lr() const override;
  void set_lr(const double lr) override;
};

struct LionParamState : public torch::optim::OptimizerCloneableParamState<LionParamState> {
  TORCH_ARG(torch::Tensor, exp_avg);

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
  friend bool operator==(const LionParamState& lhs, const LionParamState& rhs);
};

class Lion : public torch::optim::Optimizer {
 public:
  // Throws c10::Error (as LibTorch's optimizers) for lr < 0 or a beta outside [0, 1).
  explicit Lion(const std::vector<torch::optim::OptimizerParamGroup>& param_groups, LionOptions defaults = {});
  explicit Lion(std::vector<torch::Tensor> params, LionOptions defaults = {})
      : Lion({torch::optim::OptimizerParamGroup(std::move(params))}, std::move(defaults)) {}

  // LibTorch-style: whole-tensor operations, one parameter at a time (the fused step is
  // optim/fused_step.h's).
  torch::Tensor step(LossClosure closure = nullptr) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;
};

}  // namespace xlaunch::optim
