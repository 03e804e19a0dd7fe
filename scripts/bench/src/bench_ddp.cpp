// Training steps per second of the benchmark MLP (784-H-H-10, ReLU, SGD momentum 0.9, cross
// entropy, per-rank batch B), the same work as peers/torch_ddp_mlp.py.
//   --mode ddp    xlaunch data-parallel (gradients averaged across ranks, overlapped)
//   --mode local  the same step with no gradient sync: the compute-only bound of the machine
// Prints on rank 0: xlaunch-<mode> world=W steps_per_s=X samples_per_s=Y
//   --cpu_allreduce auto|mpi   the CPU gradient allreduce (AcceleratorOptions::cpu_allreduce)
//   --log_scalars N   (ddp) acc.log of N scalars after every step (warm-up steps too), the loss among
//                     them, through the trackers of XLAUNCH_LOG_WITH in XLAUNCH_PROJECT_DIR
//                     (scripts/bench/tracking.sh); the timed steps end with acc.end_training(), so
//                     they count until the trackers have written everything
//   --mode vs_plain   on a GPU (scripts/gpu/run.sh): the prepared step (prepare, acc.backward, the
//                     prepared optimizer) against the same step in plain LibTorch (module, SGD,
//                     loss.backward()) on the same device, in alternating rounds of one process;
//                     prints bench=gpu_ddp world=W ratio_vs_plain_libtorch=R ... (best round of
//                     each), or one line saying it skipped where the accelerator has no GPU.
#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>
#include <torch/cuda.h>
#include <torch/utils.h>

#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>

#include "bench_model.h"
#include "bench_timing.h"
#include "xlaunch/accelerator.h"

namespace {

// Prepared against plain on acc.device(), which must be a GPU: two copies of the same network,
// the same batch, rounds alternating between them; the best round of each counts.
int vs_plain(xlaunch::Accelerator& acc, int hidden, int batch, int steps, int warmup, int rounds) {
  const at::Device dev = acc.device();
  if (!dev.is_cuda()) {
    if (acc.is_main_process())
      std::printf("bench=gpu_ddp skipped: the accelerator's device is %s, not a GPU\n", dev.str().c_str());
    return 0;
  }
  torch::manual_seed(0);
  xlaunch::bench::Mlp plain_net(hidden), prepared_net(hidden);
  {
    torch::NoGradGuard no_grad;
    const auto from = plain_net->parameters();
    const auto to = prepared_net->parameters();
    for (size_t i = 0; i < from.size(); ++i) to[i].copy_(from[i]);
  }
  plain_net->to(dev);
  torch::optim::SGD plain_sgd(plain_net->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  torch::optim::SGD sgd(prepared_net->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  auto model = acc.prepare(prepared_net);
  auto& opt = acc.prepare(sgd);
  torch::manual_seed(acc.process_index());
  const at::Tensor x = at::randn({batch, 784}).to(dev);
  const at::Tensor y = at::randint(0, 10, {batch}, at::kLong).to(dev);

  const std::function<void()> plain = [&] {
    plain_sgd.zero_grad();
    torch::nn::functional::cross_entropy(plain_net->forward(x), y).backward();
    plain_sgd.step();
  };
  const std::function<void()> prepared = [&] {
    opt.zero_grad();
    acc.backward(torch::nn::functional::cross_entropy(model(x), y));
    opt.step();
  };
  auto rate = [&](const std::function<void()>& step) {
    for (int i = 0; i < warmup; ++i) step();
    torch::cuda::synchronize();
    acc.wait_for_everyone();
    return steps / xlaunch::bench::seconds_of([&] {
             for (int i = 0; i < steps; ++i) step();
             torch::cuda::synchronize();
             acc.wait_for_everyone();
           });
  };
  double best_plain = 0, best_prepared = 0;
  for (int r = 0; r < rounds; ++r) {
    best_plain = std::max(best_plain, rate(plain));
    best_prepared = std::max(best_prepared, rate(prepared));
  }
  if (acc.is_main_process())
    std::printf("bench=gpu_ddp world=%d ratio_vs_plain_libtorch=%.3f prepared_steps_per_s=%.2f plain_steps_per_s=%.2f "
                "hidden=%d batch=%d device=%s\n",
                acc.num_processes(), best_prepared / best_plain, best_prepared, best_plain, hidden, batch,
                dev.str().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = "ddp";
  int hidden = 1024, batch = 64, steps = 60, warmup = 10, rounds = 5, log_scalars = 0;
  xlaunch::AcceleratorOptions options = xlaunch::AcceleratorOptions::from_env();
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--mode") mode = argv[i + 1];
    else if (k == "--hidden") hidden = std::stoi(argv[i + 1]);
    else if (k == "--batch") batch = std::stoi(argv[i + 1]);
    else if (k == "--steps") steps = std::stoi(argv[i + 1]);
    else if (k == "--warmup") warmup = std::stoi(argv[i + 1]);
    else if (k == "--rounds") rounds = std::stoi(argv[i + 1]);
    else if (k == "--cpu_allreduce") options.cpu_allreduce = argv[i + 1];
    else if (k == "--log_scalars") log_scalars = std::stoi(argv[i + 1]);
    else { std::fprintf(stderr, "unknown option %s\n", k.c_str()); return 2; }
  }
  if (mode != "ddp" && mode != "local" && mode != "vs_plain") {
    std::fprintf(stderr, "--mode is ddp, local or vs_plain\n");
    return 2;
  }

  xlaunch::Accelerator acc(options);
  if (mode == "vs_plain") return vs_plain(acc, hidden, batch, steps, warmup, rounds);
  torch::manual_seed(0);
  xlaunch::bench::Mlp net(hidden);
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  torch::manual_seed(acc.process_index());
  const at::Tensor x = at::randn({batch, 784});
  const at::Tensor y = at::randint(0, 10, {batch}, at::kLong);

  std::function<void()> step;
  std::vector<std::string> names;
  for (int i = 0; i < log_scalars; ++i) names.push_back(i == 0 ? "train/loss" : "bench/value" + std::to_string(i));
  if (mode == "ddp") {
    auto model = acc.prepare(net);
    auto& opt = acc.prepare(sgd);
    if (log_scalars > 0) acc.init_trackers("bench_ddp", {{"hidden", hidden}, {"batch", batch}});
    step = [&acc, model, &opt, &x, &y, &names]() mutable {
      opt.zero_grad();
      const at::Tensor loss = torch::nn::functional::cross_entropy(model(x), y);
      acc.backward(loss);
      opt.step();
      if (names.empty()) return;
      const double l = loss.item<double>();
      xlaunch::LogValues values;
      for (size_t i = 0; i < names.size(); ++i) values[names[i]] = l * static_cast<double>(i + 1);
      acc.log(values);
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
  const double dt = xlaunch::bench::seconds_of([&] {
    for (int i = 0; i < steps; ++i) step();
    if (log_scalars > 0) acc.end_training();
    acc.wait_for_everyone();
  });
  if (acc.is_main_process()) {
    const double sps = steps / dt;
    std::printf("xlaunch-%s world=%d steps_per_s=%.2f samples_per_s=%.1f\n", mode.c_str(), acc.num_processes(), sps,
                sps * batch * acc.num_processes());
  }
  return 0;
}
