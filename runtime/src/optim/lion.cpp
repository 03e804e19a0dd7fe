// Lion (xlaunch/lion.h): options, state and the step as LibTorch's optimizers write theirs.
#include "xlaunch/lion.h"

#include <ATen/ops/zeros_like.h>
#include <torch/optim/serialize.h>

namespace xlaunch::optim {

LionOptions::LionOptions(double lr) : lr_(lr) {}

bool operator==(const LionOptions& lhs, const LionOptions& rhs) {
  return lhs.lr() == rhs.lr() && lhs.betas() == rhs.betas() && lhs.weight_decay() == rhs.weight_decay();
}

void LionOptions::serialize(torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(lr);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(betas);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(weight_decay);
}

void LionOptions::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, lr);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(betas_t, betas);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, weight_decay);
}

double LionOptions::get_lr() const { return lr(); }
void LionOptions::set_lr(const double lr) { this->lr(lr); }

bool operator==(const LionParamState& lhs, const LionParamState& rhs) { return torch::equal(lhs.exp_avg(), rhs.exp_avg()); }

void LionParamState::serialize(torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(exp_avg);
}

void LionParamState::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(torch::Tensor, exp_avg);
}

Lion::Lion(const std::vector<torch::optim::OptimizerParamGroup>& param_groups, LionOptions defaults)
    : Optimizer(param_groups, std::make_unique<LionOptions>(defaults)) {
  TORCH_CHECK(defaults.lr() >= 0, "Invalid learning rate: ", defaults.lr());
  const auto [b1, b2] = defaults.betas();
  TORCH_CHECK(0 <= b1 && b1 < 1.0, "Invalid beta parameter at index 0: ", b1);
  TORCH_CHECK(0 <= b2 && b2 < 1.0, "Invalid beta parameter at index 1: ", b2);
  TORCH_CHECK(defaults.weight_decay() >= 0, "Invalid weight_decay value: ", defaults.weight_decay());
}

torch::Tensor Lion::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss = {};
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups_) {
    const auto& o = static_cast<const LionOptions&>(group.options());
    const auto [b1, b2] = o.betas();
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      const torch::Tensor& grad = p.grad();
      TORCH_CHECK(!grad.is_sparse(), "Lion does not support sparse gradients");
      auto it = state_.find(p.unsafeGetTensorImpl());
      if (it == state_.end()) {
        auto st = std::make_unique<LionParamState>();
        st->exp_avg(at::zeros_like(p, at::MemoryFormat::Preserve));
        it = state_.emplace(p.unsafeGetTensorImpl(), std::move(st)).first;
      }
      torch::Tensor& exp_avg = static_cast<LionParamState&>(*it->second).exp_avg();
      if (o.weight_decay() != 0) p.mul_(1 - o.lr() * o.weight_decay());
      torch::Tensor update = exp_avg.mul(b1).add_(grad, 1 - b1);
      p.add_(update.sign_(), -o.lr());
      exp_avg.mul_(b2).add_(grad, 1 - b2);
    }
  }
  return loss;
}

void Lion::save(torch::serialize::OutputArchive& archive) const {
  torch::optim::serialize<LionParamState, LionOptions>(archive, *this);
}

void Lion::load(torch::serialize::InputArchive& archive) {
  torch::optim::serialize<LionParamState, LionOptions>(archive, *this);
}

}  // namespace xlaunch::optim
