// Training steps per second and memory of the benchmark MLP (784-H-H-10, ReLU, AdamW, cross
// entropy, per-rank batch B) at a ZeRO stage (docs/memory.md): the work of peers/torch_zero_mlp.py.
//   --stage S     ddp.zero_stage 0, 1 or 2 (default: XLAUNCH_ZERO_STAGE)
// Prints on rank 0:
//   xlaunch-zero stage=S world=W steps_per_s=X opt_state_mb_per_rank=M peak_rss_mb=R
// opt_state_mb_per_rank: the largest PreparedOptimizer::state_bytes() over the ranks, after the
// timed steps; peak_rss_mb: the largest VmHWM (/proc/self/status) over the ranks, at the end
// (MB = 1e6 bytes, both).
#include <torch/nn/functional/loss.h>
#include <torch/optim/adamw.h>
#include <torch/utils.h>

#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>

#include "bench_model.h"
#include "bench_timing.h"
#include "xlaunch/accelerator.h"


int main(int argc, char** argv) {
  int hidden = 1024, batch = 64, steps = 40, warmup = 5;
  xlaunch::AcceleratorOptions options = xlaunch::AcceleratorOptions::from_env();
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--stage") options.ddp.zero_stage = std::stoi(argv[i + 1]);
    else if (k == "--hidden") hidden = std::stoi(argv[i + 1]);
    else if (k == "--batch") batch = std::stoi(argv[i + 1]);
    else if (k == "--steps") steps = std::stoi(argv[i + 1]);
    else if (k == "--warmup") warmup = std::stoi(argv[i + 1]);
    else { std::fprintf(stderr, "unknown option %s\n", k.c_str()); return 2; }
  }

  xlaunch::Accelerator acc(options);
  torch::manual_seed(0);
  xlaunch::bench::Mlp net(hidden);
  auto model = acc.prepare(net);
  torch::optim::AdamW adamw(net->parameters(), torch::optim::AdamWOptions(1e-3));
  auto& opt = acc.prepare(adamw);
  torch::manual_seed(acc.process_index());
  const at::Tensor x = at::randn({batch, 784});
  const at::Tensor y = at::randint(0, 10, {batch}, at::kLong);

  auto step = [&] {
    opt.zero_grad();
    acc.backward(torch::nn::functional::cross_entropy(model(x), y));
    opt.step();
  };
  for (int i = 0; i < warmup; ++i) step();
  acc.wait_for_everyone();
  const double dt = xlaunch::bench::seconds_of([&] {
    for (int i = 0; i < steps; ++i) step();
    acc.wait_for_everyone();
  });

  const std::vector<int64_t> state = acc.gather_object(opt.state_bytes());
  const std::vector<int64_t> rss = acc.gather_object(xlaunch::bench::status_kb("VmHWM:"));
  if (acc.is_main_process())
    std::printf("xlaunch-zero stage=%d world=%d steps_per_s=%.2f opt_state_mb_per_rank=%.1f peak_rss_mb=%.1f\n",
                options.ddp.zero_stage, acc.num_processes(), steps / dt,
                static_cast<double>(*std::max_element(state.begin(), state.end())) / 1e6,
                static_cast<double>(*std::max_element(rss.begin(), rss.end())) * 1024 / 1e6);
  return 0;
}
