// A training loop for the GPU bundle's host-device sync check (scripts/gpu/sync_check.sh): a small
// MLP on the rank's device, trained on one batch made there. With --item, every step reads the loss
// on the host (loss.item(): one host-device sync per step, which the report must count); without,
// the loss is summed on the device and read once, after the loop (no sync in any step).
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/zeros.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "xlaunch/accelerator.h"

int main(int argc, char** argv) {
  int64_t steps = 60;
  bool item = false;
  CLI::App app{"One loss.item() per step, or none, for the report's host-device sync count"};
  app.add_option("--steps", steps, "Optimizer steps");
  app.add_flag("--item", item, "Read the loss with .item() in every step");
  CLI11_PARSE(app, argc, argv);

  xlaunch::Accelerator acc;
  acc.set_seed(1);
  auto model = acc.prepare(torch::nn::Sequential(torch::nn::Linear(64, 256), torch::nn::ReLU(), torch::nn::Linear(256, 8)));
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.01));
  auto& opt = acc.prepare(sgd);
  const auto on_device = at::TensorOptions().device(acc.device());
  const at::Tensor x = at::randn({128, 64}, on_device), y = at::randn({128, 8}, on_device);
  double read = 0;
  at::Tensor summed = at::zeros({}, on_device);
  for (int64_t step = 0; step < steps; ++step) {
    const at::Tensor loss = torch::nn::functional::mse_loss(model(x), y);
    acc.backward(loss);
    opt.step();
    opt.zero_grad();
    if (item) read += loss.item<double>();
    else summed += loss.detach();
  }
  if (!item) read = summed.item<double>();  // after the last step: outside every step
  char mean[32];
  std::snprintf(mean, sizeof mean, "%.17g", read / static_cast<double>(steps));  // every digit: runs compare exactly
  acc.print("sync_count_job steps=", steps, " item=", item, " mean_loss=", mean);
  return 0;
}
