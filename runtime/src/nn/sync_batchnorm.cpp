// SyncBatchNorm's forward and backward (xlaunch/sync_batchnorm.h).
//
// The statistics travel as (count, mean, M2) per rank, not as sums of x and x²: merging means
// and centred second moments (Chan et al.) keeps the variance exact where E[x²] - E[x]² would
// cancel catastrophically (large means, small spreads). They are merged in double, from the same
// gathered bytes in the same order on every rank, so every rank computes bit-identical statistics
// and running statistics.
//
// Backward of y = w·x̂ + b, x̂ = (x - μ)·σ⁻¹, where μ and σ are over the concatenated batch of N rows:
//   dx = w·σ⁻¹·(dy - Σdy/N - x̂·Σ(dy·x̂)/N)
// with both sums over every rank's rows (one allreduce of 2C values). dw = Σ(dy·x̂) and db = Σdy
// stay this rank's: the gradient reducer sums (averages) them over the ranks like any parameter's.
#include "xlaunch/sync_batchnorm.h"

#include <ATen/Context.h>
#include <ATen/ops/batch_norm.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/full.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/var_mean.h>
#include <ATen/ops/zeros.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>

#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "xlaunch/error.h"

namespace xlaunch {

namespace {

using torch::autograd::variable_list;

// The dimensions statistics are taken over (all but the channel's) and the shape that broadcasts
// a per-channel [C] vector against the input.
struct Layout {
  std::vector<int64_t> reduce_dims;
  std::vector<int64_t> channel_shape;
};

Layout layout_of(const at::Tensor& x) {
  Layout l{{0}, {1, x.size(1)}};
  for (int64_t d = 2; d < x.dim(); ++d) {
    l.reduce_dims.push_back(d);
    l.channel_shape.push_back(1);
  }
  return l;
}

// Half-precision inputs (autocast) are normalised in float, as BatchNorm's kernels do.
at::ScalarType compute_type(const at::Tensor& x) {
  return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

// Backward of the synchronised normalisation (see the top of the file). Next edges: input, weight,
// bias, in that order.
struct SyncBatchNormBackward : torch::autograd::Node {
  std::shared_ptr<Communicator> comm;
  Layout layout;
  at::Tensor xhat, invstd, weight, total;  // total: N, the rows over every rank (double, [1])
  at::ScalarType input_type = at::kFloat;

  std::string name() const override { return "xlaunch::SyncBatchNormBackward"; }

  variable_list apply(variable_list&& grads) override {
    at::Tensor dy = grads[0].defined() ? grads[0].to(xhat.scalar_type()) : at::zeros_like(xhat);
    const at::Tensor sum_dy = dy.sum(layout.reduce_dims);
    const at::Tensor sum_dy_xhat = (dy * xhat).sum(layout.reduce_dims);
    variable_list out(3);
    // Whether the input needs a gradient is a property of the graph, the same on every rank, so
    // every rank issues this allreduce or none does.
    if (should_compute_output(0)) {
      const int64_t c = sum_dy.size(0);
      at::Tensor both = at::cat({sum_dy, sum_dy_xhat});
      comm->allreduce(both, ReduceOp::Sum);
      both = both / total.to(both.scalar_type());
      const at::Tensor scale = weight.defined() ? invstd * weight.to(invstd.scalar_type()) : invstd;
      at::Tensor dx = (dy - both.slice(0, 0, c).view(layout.channel_shape) -
                       xhat * both.slice(0, c, 2 * c).view(layout.channel_shape)) *
                      scale.view(layout.channel_shape);
      out[0] = dx.to(input_type);
    }
    if (weight.defined() && should_compute_output(1)) out[1] = sum_dy_xhat.to(weight.scalar_type());
    if (weight.defined() && should_compute_output(2)) out[2] = sum_dy.to(weight.scalar_type());
    return out;
  }
};

// This rank's (count, mean, M2) per channel, in double: [1 + 2C].
at::Tensor local_moments(const at::Tensor& x, const Layout& l) {
  const int64_t c = x.size(1);
  const int64_t n = c == 0 ? 0 : x.numel() / c;
  auto dbl = x.options().dtype(at::kDouble);
  if (n == 0) return at::cat({at::zeros({1}, dbl), at::zeros({2 * c}, dbl)});
  auto [var, mean] = at::var_mean(x, l.reduce_dims, std::optional<c10::Scalar>(0), /*keepdim=*/false);
  return at::cat({at::full({1}, static_cast<double>(n), dbl), mean.to(at::kDouble), (var * n).to(at::kDouble)});
}

struct GlobalMoments {
  at::Tensor mean, m2, total;  // [C], [C], [1]; double
};

// Merges every rank's (count, mean, M2), gathered as rows of [world, 1 + 2C].
GlobalMoments merge(const at::Tensor& gathered, int64_t c) {
  const at::Tensor counts = gathered.slice(1, 0, 1);
  const at::Tensor means = gathered.slice(1, 1, 1 + c);
  const at::Tensor m2s = gathered.slice(1, 1 + c, 1 + 2 * c);
  GlobalMoments g;
  g.total = counts.sum(0);
  g.mean = (counts * means).sum(0) / g.total;
  const at::Tensor d = means - g.mean;
  g.m2 = (m2s + counts * d * d).sum(0);
  return g;
}

}  // namespace

SyncBatchNormImpl::SyncBatchNormImpl(const torch::nn::BatchNormOptions& options_) : options(options_) { reset(); }

SyncBatchNormImpl::SyncBatchNormImpl(const torch::nn::BatchNormOptions& options_, const Tensors& tensors)
    : options(options_) {
  register_tensors(tensors);
}

void SyncBatchNormImpl::reset() {
  const int64_t c = options.num_features();
  Tensors t;
  if (options.affine()) {
    t.weight = at::ones({c}).set_requires_grad(true);
    t.bias = at::zeros({c}).set_requires_grad(true);
  }
  if (options.track_running_stats()) {
    t.running_mean = at::zeros({c});
    t.running_var = at::ones({c});
    t.num_batches_tracked = at::scalar_tensor(0, at::kLong);
  }
  register_tensors(t);
}

void SyncBatchNormImpl::register_tensors(const Tensors& t) {
  if (options.affine()) {
    // A frozen BatchNorm stays frozen: the flag is the adopted tensor's own.
    weight = register_parameter("weight", t.weight, t.weight.requires_grad());
    bias = register_parameter("bias", t.bias, t.bias.requires_grad());
  }
  if (options.track_running_stats()) {
    running_mean = register_buffer("running_mean", t.running_mean);
    running_var = register_buffer("running_var", t.running_var);
    num_batches_tracked = register_buffer("num_batches_tracked", t.num_batches_tracked);
  }
}

void SyncBatchNormImpl::pretty_print(std::ostream& stream) const {
  stream << std::boolalpha << "xlaunch::SyncBatchNorm(" << options.num_features() << ", eps=" << options.eps()
         << ", momentum=";
  if (options.momentum().has_value()) stream << options.momentum().value();
  else stream << "None";
  stream << ", affine=" << options.affine() << ", track_running_stats=" << options.track_running_stats() << ')';
}

at::Tensor SyncBatchNormImpl::forward(const at::Tensor& input) {
  if (input.dim() < 2 || input.dim() > 5 || input.size(1) != options.num_features()) {
    std::ostringstream got;
    got << input.sizes();
    throw UsageError("SyncBatchNorm(" + std::to_string(options.num_features()) + "): expected an input [N, C], [N, C, L], "
                     "[N, C, H, W] or [N, C, D, H, W] with C = " + std::to_string(options.num_features()) + ", got " +
                     got.str() + ". Give the layer num_features equal to the channels of its input.");
  }
  // The momentum and the step counter exactly as torch::nn::BatchNorm (None: cumulative average).
  double factor = options.momentum().value_or(0.0);
  if (is_training() && options.track_running_stats() && num_batches_tracked.defined()) {
    num_batches_tracked += 1;
    if (!options.momentum().has_value()) factor = 1.0 / num_batches_tracked.item<double>();
  }
  if (!is_training() || !comm_) {
    return at::batch_norm(input, weight, bias, running_mean, running_var,
                          is_training() || !options.track_running_stats(), factor, options.eps(),
                          at::globalContext().userEnabledCuDNN());
  }
  const Layout l = layout_of(input);
  const int64_t c = input.size(1);
  if (comm_->size() == 1 && input.numel() / c == 1)  // the one-process error BatchNorm gives
    throw UsageError("SyncBatchNorm: expected more than 1 value per channel when training, got input size " +
                     std::to_string(input.size(0)) + " x " + std::to_string(c) + " on the only rank");

  at::Tensor x, xhat, invstd;
  GlobalMoments g;
  {
    c10::AutoGradMode no_grad(false);
    x = input.to(compute_type(input));
    g = merge(comm_->allgather(local_moments(x, l)).view({comm_->size(), 1 + 2 * c}), c);
    invstd = (g.m2 / g.total + options.eps()).rsqrt().to(x.scalar_type());
    xhat = (x - g.mean.to(x.scalar_type()).view(l.channel_shape)) * invstd.view(l.channel_shape);
    if (running_mean.defined()) {
      const at::Tensor unbiased = g.m2 / (g.total - 1);
      running_mean.mul_(1 - factor).add_(g.mean.to(running_mean.scalar_type()), factor);
      running_var.mul_(1 - factor).add_(unbiased.to(running_var.scalar_type()), factor);
    }
  }
  at::Tensor y;
  {
    c10::AutoGradMode no_grad(false);
    y = weight.defined() ? xhat * weight.to(x.scalar_type()).view(l.channel_shape) +
                               bias.to(x.scalar_type()).view(l.channel_shape)
                         : xhat.clone();
    y = y.to(input.scalar_type());
  }
  if (torch::autograd::compute_requires_grad(input, weight, bias)) {
    auto node = std::shared_ptr<SyncBatchNormBackward>(new SyncBatchNormBackward(), torch::autograd::deleteNode);
    node->set_next_edges(torch::autograd::collect_next_edges(input, weight, bias));
    node->comm = comm_;
    node->layout = l;
    node->xhat = xhat;
    node->invstd = invstd;
    node->weight = weight.defined() ? weight.detach() : at::Tensor();
    node->total = g.total;
    node->input_type = input.scalar_type();
    torch::autograd::set_history(y, node);
  }
  return y;
}

}  // namespace xlaunch
