// Training steps per second of the benchmark MLP (784-H-H-10, ReLU, SGD momentum 0.9, cross
// entropy, per-rank batch B), the same work as peers/torch_ddp_mlp.py.
//   --mode ddp    xlaunch data-parallel (gradients averaged across ranks, overlapped)
//   --mode local  the same step with no gradient sync: the compute-only bound of the machine
// Prints on rank 0: xlaunch-<mode> world=W steps_per_s=X samples_per_s=Y
#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "bench_model.h"
#include "xlaunch/accelerator.h"

int main(int argc, char** argv) {
  std::string mode = "ddp";
  int hidden = 1024, batch = 64, steps = 60, warmup = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--mode") mode = argv[i + 1];
    else if (k == "--hidden") hidden = std::stoi(argv[i + 1]);
    else if (k == "--batch") batch = std::stoi(argv[i + 1]);
    else if (k == "--steps") steps = std::stoi(argv[i + 1]);
    else if (k == "--warmup") warmup = std::stoi(argv[i + 1]);
    else { std::fprintf(stderr, "unknown option %s\n", k.c_str()); return 2; }
  }
  if (mode != "ddp" && mode != "local") { std::fprintf(stderr, "--mode is ddp or local\n"); return 2; }

  xlaunch::Accelerator acc;
  torch::manual_seed(0);
  xlaunch::bench::Mlp net(hidden);
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  torch::manual_seed(acc.process_index());
  const at::Tensor x = at::randn({batch, 784});
  const at::Tensor y = at::randint(0, 10, {batch}, at::kLong);

  std::function<void()> step;
  if (mode == "ddp") {
    auto model = acc.prepare(net);
    auto& opt = acc.prepare(sgd);
    step = [&acc, model, &opt, &x, &y]() mutable {
      opt.zero_grad();
      acc.backward(torch::nn::functional::cross_entropy(model(x), y));
      opt.step();
    };
  } else {
    step = [&net, &sgd, &x, &y] {
      sgd.zero_grad();
      torch::nn::functional::cross_entropy(net->forward(x), y).backward();
      sgd.step();
    };
  }
  for (int i = 0; i < warmup; ++i) step();
  acc.wait_for_everyone();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  acc.wait_for_everyone();
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (acc.is_main_process()) {
    const double sps = steps / dt;
    std::printf("xlaunch-%s world=%d steps_per_s=%.2f samples_per_s=%.1f\n", mode.c_str(), acc.num_processes(), sps,
                sps * batch * acc.num_processes());
  }
  return 0;
}
