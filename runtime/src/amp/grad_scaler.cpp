#include "xlaunch/grad_scaler.h"

#include <ATen/ops/maximum.h>
#include <ATen/ops/zeros.h>
#include <torch/optim/optimizer.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <sstream>

#include "profile/sync_count.h"
#include "xlaunch/extend/communicator.h"
#include "xlaunch/error.h"
#include "xlaunch/kernels/amp_unscale.h"

#if XLAUNCH_HAVE_CUDA
#include "amp/grad_scaler_cuda.h"
#endif

namespace xlaunch {
namespace {

// The report's words for the one host-device sync of an fp16 step (profile/sync_count.h's RuntimeSync).
constexpr const char* kInfCheck = "fp16 loss scaling's inf/NaN check: mixed_precision bf16 needs none";

std::optional<kernels::DType> kernel_dtype(c10::ScalarType t) {
  switch (t) {
    case c10::kFloat: return kernels::DType::Float32;
    case c10::kHalf: return kernels::DType::Float16;
    case c10::kBFloat16: return kernels::DType::BFloat16;
    default: return std::nullopt;
  }
}

// Tensors the fused kernels cannot take (double, strided, other devices): the same operation
// through ATen ops, into `found` on the tensor's device.
void unscale_with_aten(const at::Tensor& t, float inv_scale, const at::Tensor& found) {
  found.copy_(at::maximum(found, t.isfinite().logical_not().any().to(at::kFloat).reshape({1})));
  if (inv_scale != 1.0f) t.mul_(static_cast<double>(inv_scale));
}

struct Group {
  c10::Device device;
  c10::ScalarType dtype;
  std::vector<at::Tensor> tensors;
};

void check_option(bool ok, const char* name, double value, const char* rule) {
  if (ok) return;
  std::ostringstream os;
  os << "GradScaler: " << name << "=" << value << " " << rule;
  throw UsageError(os.str());
}

void validate(double scale, double growth_factor, double backoff_factor, int64_t growth_interval) {
  check_option(std::isfinite(scale) && scale > 0, "init_scale", scale, "must be a finite number > 0");
  check_option(growth_factor > 1 && std::isfinite(growth_factor), "growth_factor", growth_factor,
               "must be > 1 (the scale grows by it after growth_interval clean steps)");
  check_option(backoff_factor > 0 && backoff_factor < 1, "backoff_factor", backoff_factor,
               "must be in (0, 1) (the scale shrinks by it after a step with inf/NaN gradients)");
  check_option(growth_interval >= 1, "growth_interval", static_cast<double>(growth_interval), "must be >= 1");
}

}  // namespace

at::Tensor unscale_and_check_(const std::vector<at::Tensor>& tensors, double inv_scale_d) {
  const float inv_scale = static_cast<float>(inv_scale_d);
  std::vector<Group> groups;
  for (const at::Tensor& t : tensors) {
    if (!t.defined()) continue;
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const Group& g) { return g.device == t.device() && g.dtype == t.scalar_type(); });
    if (it == groups.end()) it = groups.insert(groups.end(), Group{t.device(), t.scalar_type(), {}});
    it->tensors.push_back(t);
  }
  // One flag per device; every group on a device sets the same one (the kernels never clear it).
  std::vector<at::Tensor> flags;
  auto flag_on = [&](c10::Device d) -> const at::Tensor& {
    for (const at::Tensor& f : flags)
      if (f.device() == d) return f;
    flags.push_back(at::zeros({1}, at::TensorOptions().dtype(at::kFloat).device(d)));
    return flags.back();
  };
  if (groups.empty()) flag_on(c10::Device(c10::kCPU));

  for (const Group& g : groups) {
    const at::Tensor& found = flag_on(g.device);
    const std::optional<kernels::DType> kd = kernel_dtype(g.dtype);
    const bool fused = kd && (g.device.is_cpu() || (XLAUNCH_HAVE_CUDA && g.device.is_cuda()));
    std::vector<kernels::TensorSpan> spans;
    for (const at::Tensor& t : g.tensors) {
      if (fused && t.is_contiguous()) spans.push_back({t.data_ptr(), t.numel()});
      else unscale_with_aten(t, inv_scale, found);
    }
    if (spans.empty()) continue;
    if (g.device.is_cpu()) {
      kernels::unscale_and_check_cpu(*kd, spans.data(), spans.size(), inv_scale, found.data_ptr<float>());
    } else {
#if XLAUNCH_HAVE_CUDA
      detail::unscale_and_check_cuda(*kd, spans, inv_scale, found);
#endif
    }
  }
  at::Tensor result = flags.front();
  for (size_t i = 1; i < flags.size(); ++i) result = at::maximum(result, flags[i].to(result.device()));
  return result;
}

GradScaler::GradScaler(GradScalerOptions options, std::shared_ptr<Communicator> comm, at::Device device)
    : options_(options), comm_(std::move(comm)), device_(device), scale_(static_cast<float>(options.init_scale)) {
  validate(options.init_scale, options.growth_factor, options.backoff_factor, options.growth_interval);
}

float GradScaler::inv_scale() const {
  // As torch: the reciprocal in double, rounded once to float32.
  return static_cast<float>(1.0 / static_cast<double>(scale_));
}

GradScaler::PerOptimizer& GradScaler::record(const torch::optim::Optimizer& optimizer) {
  return per_optimizer_[&optimizer];
}

at::Tensor GradScaler::scale(const at::Tensor& loss) const {
  if (!options_.enabled) return loss;
  if (!loss.defined()) throw UsageError("GradScaler::scale(): the loss is an undefined tensor");
  const bool narrow = loss.scalar_type() == at::kHalf || loss.scalar_type() == at::kBFloat16;
  return (narrow ? loss.to(at::kFloat) : loss).mul(static_cast<double>(scale_));
}

void GradScaler::unscale_(torch::optim::Optimizer& optimizer) {
  if (!options_.enabled) return;
  PerOptimizer& r = record(optimizer);
  if (r.stage == Stage::Unscaled)
    throw UsageError("GradScaler::unscale_() was already called for this optimizer since the last update(); "
                     "call it at most once per step (step() and clip_grad_norm_ reuse that result; "
                     "check is_unscaled() first)");
  if (r.stage == Stage::Stepped)
    throw UsageError("GradScaler::unscale_() was called after step() for this optimizer; unscale before "
                     "step(), and call update() to start the next iteration");
  std::vector<at::Tensor> grads;
  for (const auto& group : optimizer.param_groups())
    for (const at::Tensor& p : group.params())
      if (p.grad().defined()) grads.push_back(p.grad());
  r.found_inf = unscale_and_check_(grads, inv_scale());
  // No gradient here (a frozen model, or none reached this optimizer): the flag is made on the
  // CPU, but the other ranks' flags live on the parameters' device, and so must this one before it
  // goes to that device's communicator (NCCL takes device memory only).
  if (grads.empty()) {
    at::Device where = device_;
    for (const auto& group : optimizer.param_groups())
      if (!group.params().empty()) {
        where = group.params().front().device();
        break;
      }
    r.found_inf = r.found_inf.to(where);
  }
  // Agree on the verdict: a non-finite gradient on any rank skips the step on every rank.
  if (comm_ && comm_->size() > 1) comm_->allreduce(r.found_inf, ReduceOp::Max);
  r.stage = Stage::Unscaled;
}

bool GradScaler::is_unscaled(const torch::optim::Optimizer& optimizer) const {
  const auto it = per_optimizer_.find(&optimizer);
  return it != per_optimizer_.end() && it->second.stage == Stage::Unscaled;
}

bool GradScaler::step(torch::optim::Optimizer& optimizer) {
  return step(optimizer, [&optimizer] { optimizer.step(); });
}

bool GradScaler::step(torch::optim::Optimizer& optimizer, const std::function<void()>& step_fn) {
  if (!options_.enabled) {
    step_fn();
    return true;
  }
  if (record(optimizer).stage == Stage::Stepped)
    throw UsageError("GradScaler::step() was already called for this optimizer since the last update(); "
                     "call update() once per iteration, after the optimizers' step()");
  if (record(optimizer).stage == Stage::Ready) unscale_(optimizer);
  PerOptimizer& r = record(optimizer);
  r.stage = Stage::Stepped;
  {
    profile::syncs::RuntimeSync sync(kInfCheck);
    r.found_on_host = r.found_inf.item<float>() != 0.0f;  // the one host synchronisation
  }
  last_step_skipped_ = r.found_on_host == 1;
  if (last_step_skipped_) {
    ++skipped_steps_;
    return false;
  }
  step_fn();
  return true;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  bool any_record = false, found_inf = false;
  const profile::syncs::RuntimeSync sync(kInfCheck);  // an optimizer unscaled but not stepped: read here
  for (const auto& [opt, r] : per_optimizer_) {
    if (r.stage == Stage::Ready) continue;
    any_record = true;
    found_inf = found_inf || (r.found_on_host >= 0 ? r.found_on_host == 1 : r.found_inf.item<float>() != 0.0f);
  }
  if (!any_record)
    throw UsageError("GradScaler::update() found no step() or unscale_() since the last update(); call "
                     "scaler.step(optimizer) first (inf/NaN checks decide how the scale changes)");
  per_optimizer_.clear();
  if (found_inf) {
    scale_ = static_cast<float>(scale_ * options_.backoff_factor);
    growth_tracker_ = 0;
    return;
  }
  if (++growth_tracker_ == options_.growth_interval) {
    const float grown = static_cast<float>(scale_ * options_.growth_factor);
    if (std::isfinite(grown)) scale_ = grown;
    growth_tracker_ = 0;
  }
}

GradScalerState GradScaler::state_dict() const {
  GradScalerState s;
  s.scale = options_.enabled ? scale_ : 1.0;
  s.growth_factor = options_.growth_factor;
  s.backoff_factor = options_.backoff_factor;
  s.growth_interval = options_.growth_interval;
  s.growth_tracker = growth_tracker_;
  return s;
}

void GradScaler::load_state_dict(const GradScalerState& s) {
  validate(s.scale, s.growth_factor, s.backoff_factor, s.growth_interval);
  check_option(s.growth_tracker >= 0 && s.growth_tracker < s.growth_interval, "growth_tracker",
               static_cast<double>(s.growth_tracker), "must be in [0, growth_interval)");
  scale_ = static_cast<float>(s.scale);
  options_.growth_factor = s.growth_factor;
  options_.backoff_factor = s.backoff_factor;
  options_.growth_interval = s.growth_interval;
  growth_tracker_ = s.growth_tracker;
  skipped_steps_ = 0;
  last_step_skipped_ = false;
  per_optimizer_.clear();
}

}  // namespace xlaunch
