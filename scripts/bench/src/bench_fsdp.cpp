// Tokens per second and memory of the GPT of examples/gpt_model.h at a ZeRO stage (docs/memory.md):
// the work of peers/torch_fsdp2_gpt.py (random byte tokens, AdamW, cross entropy, per-rank batch).
//   --stage S  --dim D --layers L --heads H --seq T --batch B --steps N --warmup K
//   --prefetch P --reshard_after_forward 0|1 --activation_checkpointing 0|1 --cpu_allreduce auto|mpi
//   --shard_group world|machine (the fsdp section and ddp.shard_group; default: the environment's)
//   --model_dtype float32|bfloat16 (the model's parameters: net->to(kBFloat16) before prepare)
//   --count_link DEV: rank 0 also prints link_mb_per_step=, the bytes DEV sent and received
//   (/sys/class/net/DEV/statistics, in rank 0's network namespace) per timed step, MB = 1e6 bytes
// Prints on rank 0:
//   xlaunch-fsdp stage=S world=W params_m=P tokens_per_s=X peak_rss_above_bare_mb=R peak_rss_mb=T
//     opt_state_mb_per_rank=M
// peak_rss_above_bare_mb: the largest, over the ranks, of VmHWM at the end minus VmHWM once the
// Accelerator is made (before the model): what training added to the bare process (MB = 1e6 bytes).
#include <torch/nn/functional/loss.h>
#include <torch/optim/adamw.h>

#include <ATen/ops/randint.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "../../../examples/gpt_model.h"
#include "bench_timing.h"
#include "xlaunch/accelerator.h"

namespace {
// The bytes network device `dev` has sent and received (0 without one).
int64_t link_bytes(const std::string& dev) {
  if (dev.empty()) return 0;
  int64_t total = 0;
  for (const char* what : {"tx_bytes", "rx_bytes"}) {
    std::ifstream in("/sys/class/net/" + dev + "/statistics/" + what);
    int64_t n = 0;
    if (!(in >> n)) {
      std::fprintf(stderr, "--count_link %s: no /sys/class/net/%s/statistics/%s\n", dev.c_str(), dev.c_str(), what);
      std::exit(2);
    }
    total += n;
  }
  return total;
}
}  // namespace

int main(int argc, char** argv) {
  int64_t dim = 256, layers = 4, heads = 8, seq = 128, batch = 8;
  int steps = 10, warmup = 2;
  std::string link;  // --count_link
  std::string model_dtype = "float32";
  xlaunch::AcceleratorOptions options = xlaunch::AcceleratorOptions::from_env();
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const std::string v = argv[i + 1];
    if (k == "--stage") options.ddp.zero_stage = std::stoi(v);
    else if (k == "--dim") dim = std::stoll(v);
    else if (k == "--layers") layers = std::stoll(v);
    else if (k == "--heads") heads = std::stoll(v);
    else if (k == "--seq") seq = std::stoll(v);
    else if (k == "--batch") batch = std::stoll(v);
    else if (k == "--steps") steps = std::stoi(v);
    else if (k == "--warmup") warmup = std::stoi(v);
    else if (k == "--prefetch") options.ddp.fsdp_prefetch = std::stoi(v);
    else if (k == "--reshard_after_forward") options.ddp.reshard_after_forward = v != "0";
    else if (k == "--activation_checkpointing") options.ddp.fsdp_activation_checkpointing = v != "0";
    else if (k == "--cpu_allreduce") options.cpu_allreduce = v;
    else if (k == "--mixed_precision") options.mixed_precision = v;
    else if (k == "--param_dtype") options.ddp.fsdp_param_dtype = v;
    else if (k == "--shard_group") options.ddp.shard_group = v;
    else if (k == "--count_link") link = v;
    else if (k == "--model_dtype") model_dtype = v;
    else { std::fprintf(stderr, "unknown option %s\n", k.c_str()); return 2; }
  }

  xlaunch::Accelerator acc(options);
  const int64_t bare = xlaunch::bench::status_kb("VmHWM:");
  torch::manual_seed(0);
  xlaunch::examples::Gpt net(dim, layers, heads, seq);
  int64_t params = 0;
  for (const auto& p : net->parameters()) params += p.numel();
  if (model_dtype == "bfloat16") net->to(at::kBFloat16);
  else if (model_dtype != "float32") {
    std::fprintf(stderr, "--model_dtype %s: use float32 or bfloat16\n", model_dtype.c_str());
    return 2;
  }
  auto model = acc.prepare(net);
  torch::optim::AdamW adamw(net->parameters(), torch::optim::AdamWOptions(1e-3));
  auto& opt = acc.prepare(adamw);
  torch::manual_seed(acc.process_index());
  const at::Tensor tokens = at::randint(0, 256, {batch, seq + 1}, at::kLong);
  const at::Tensor x = tokens.narrow(1, 0, seq), y = tokens.narrow(1, 1, seq).reshape({-1});

  auto step = [&] {
    opt.zero_grad();
    acc.backward(torch::nn::functional::cross_entropy(model(x).to(at::kFloat).reshape({-1, 256}), y));
    opt.step();
  };
  for (int i = 0; i < warmup; ++i) step();
  acc.wait_for_everyone();
  const int64_t link_before = link_bytes(link);
  const double dt = xlaunch::bench::seconds_of([&] {
    for (int i = 0; i < steps; ++i) step();
    acc.wait_for_everyone();
  });
  const int64_t link_after = link_bytes(link);
  const std::vector<int64_t> above = acc.gather_object(xlaunch::bench::status_kb("VmHWM:") - bare);
  const std::vector<int64_t> peak = acc.gather_object(xlaunch::bench::status_kb("VmHWM:"));
  const std::vector<int64_t> state = acc.gather_object(opt.state_bytes());
  if (acc.is_main_process())
    std::printf("xlaunch-fsdp stage=%d world=%d params_m=%.2f tokens_per_s=%.0f peak_rss_above_bare_mb=%.1f "
                "peak_rss_mb=%.1f opt_state_mb_per_rank=%.1f\n",
                options.ddp.zero_stage, acc.num_processes(), static_cast<double>(params) / 1e6,
                static_cast<double>(steps * batch * seq * acc.num_processes()) / dt,
                static_cast<double>(*std::max_element(above.begin(), above.end())) * 1024 / 1e6,
                static_cast<double>(*std::max_element(peak.begin(), peak.end())) * 1024 / 1e6,
                static_cast<double>(*std::max_element(state.begin(), state.end())) / 1e6);
  if (acc.is_main_process() && !link.empty())
    std::printf("xlaunch-fsdp-link shard_group=%s link_mb_per_step=%.2f\n", options.ddp.shard_group.c_str(),
                static_cast<double>(link_after - link_before) / 1e6 / steps);
  return 0;
}
