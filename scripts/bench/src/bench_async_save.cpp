// One save_state of the benchmark MLP (784-H-H-10) with AdamW at the ZeRO stage of
// XLAUNCH_ZERO_STAGE, synchronous or in the background (XLAUNCH_CHECKPOINT_ASYNC), run under
// mpirun by scripts/bench/async_save.sh, which alternates the two.
//   --dir DIR      the checkpoint directory (replaced)
//   --hidden H     the MLP's width (default 4096: 20M parameters)
// Prints on rank 0:
//   xlaunch-async-save async=0|1 params_m=P copy_ms=C blocked_ms=B total_ms=T
// copy_ms: the host copy of what this rank saves (its parameters, or its shard of them at stage 3,
//   and its optimizer state: every tensor cloned), the floor of what a save must hold training for;
// blocked_ms: how long save_state held the caller; total_ms: until the checkpoint was complete
//   (save_state, then wait_for_checkpoint). The largest over the ranks, each.
#include <torch/nn/functional/loss.h>
#include <torch/optim/adamw.h>

#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/tensor.h>

#include <cstdio>
#include <string>
#include <vector>

#include "bench_model.h"
#include "bench_timing.h"
#include "xlaunch/accelerator.h"

int main(int argc, char** argv) {
  int hidden = 4096;
  std::string dir;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--hidden") hidden = std::stoi(argv[i + 1]);
    else if (k == "--dir") dir = argv[i + 1];
    else { std::fprintf(stderr, "unknown option %s\n", k.c_str()); return 2; }
  }
  if (dir.empty()) { std::fprintf(stderr, "--dir DIR is required\n"); return 2; }
  const xlaunch::AcceleratorOptions options = xlaunch::AcceleratorOptions::from_env();
  xlaunch::Accelerator acc(options);
  torch::manual_seed(0);
  xlaunch::bench::Mlp net(hidden);
  int64_t params = 0;
  for (const auto& p : net->parameters()) params += p.numel();
  auto model = acc.prepare(net);
  torch::optim::AdamW adamw(net->parameters(), torch::optim::AdamWOptions(1e-3));
  auto& opt = acc.prepare(adamw);
  const at::Tensor x = at::randn({32, 784});
  const at::Tensor y = at::randint(0, 10, {32}, at::kLong);
  for (int i = 0; i < 2; ++i) {  // the optimizer's state exists
    opt.zero_grad();
    acc.backward(torch::nn::functional::cross_entropy(model(x), y));
    opt.step();
  }
  acc.wait_for_everyone();
  // What this rank's save copies: the tensors its optimizer holds (whole parameters, or its
  // shard pieces) and their state.
  std::vector<at::Tensor> copies;
  const double copy_s = xlaunch::bench::seconds_of([&] {
    for (const auto& group : adamw.param_groups())
      for (const at::Tensor& p : group.params()) copies.push_back(p.detach().clone());
    for (const auto& [key, state] : adamw.state()) {
      const auto& s = static_cast<const torch::optim::AdamWParamState&>(*state);
      copies.push_back(s.exp_avg().clone());
      copies.push_back(s.exp_avg_sq().clone());
    }
  });
  copies.clear();
  acc.wait_for_everyone();
  const auto t0 = xlaunch::bench::Clock::now();
  acc.save_state(dir);
  const double blocked_s = xlaunch::bench::seconds_since(t0);
  acc.wait_for_checkpoint();
  const double total_s = xlaunch::bench::seconds_since(t0);
  const at::Tensor mine = at::tensor({copy_s, blocked_s, total_s}, at::kDouble);
  const at::Tensor worst = acc.reduce(mine, xlaunch::ReduceOp::Max);
  if (acc.is_main_process())
    std::printf("xlaunch-async-save async=%d params_m=%.1f copy_ms=%.1f blocked_ms=%.1f total_ms=%.1f\n",
                options.checkpoint_async ? 1 : 0, static_cast<double>(params) / 1e6, worst[0].item<double>() * 1e3,
                worst[1].item<double>() * 1e3, worst[2].item<double>() * 1e3);
  return 0;
}
