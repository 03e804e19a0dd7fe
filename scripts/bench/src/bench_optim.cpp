// One optimizer's step on the CPU (scripts/bench/optim.sh): AdamW over a GPT-like model's
// parameters (token and position embeddings, then per layer two LayerNorms, the attention's qkv and
// projection, the MLP's two matrices, with biases: many small tensors and a few large ones), sized
// to about --params_m million parameters; each parameter has a fixed random gradient.
//
//   bench_optim --system fused|libtorch|stream --params_m 10 --threads 1 --steps 20
// prints
//   bench=optim_one system=S params_m=P tensors=T threads=N ms_per_step=X gbps=Y
// fused: xlaunch's fused step (optim/fused_step.h); libtorch: torch::optim::AdamW::step();
// stream: the same bytes moved with next to no arithmetic (p += g, m += g, v += g over the same
// tensors: p, g, m, v read, p, m, v written, 28 bytes per parameter, what one AdamW step reads and
// writes), on the same threads: the machine's bandwidth for this traffic. (A plain copy_ of 28 bytes
// per parameter is no measure of it: it streams other lines, and runs at half the rate here.)
// gbps: those 28 bytes per parameter over the median step's time. The first two steps are warm-up
// (the state is made).
//
// --dtype bfloat16: bfloat16 parameters and gradients. The fused step then keeps float32 master
// weights and state (fused_step.h) and moves 30 bytes per parameter (p, g, master, m, v read; p,
// master, m, v written); LibTorch's AdamW keeps bfloat16 state, at least 14 bytes. gbps counts
// each system's own bytes (printed as bytes_per_param); stream stays float32, the bandwidth. This file is compiled with OpenMP (CMakeLists.txt), so that
// at::parallel_for uses the threads.
#include <ATen/Parallel.h>
#include <ATen/ops/randn.h>
#include <CLI/CLI.hpp>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_timing.h"
#include "optim/fused_step.h"

namespace {

std::vector<std::vector<int64_t>> gpt_shapes(double params_m) {
  const double target = params_m * 1e6;
  const int64_t d = target >= 5e7 ? 768 : 256, vocab = 8192, ctx = 1024;
  const double per_layer = 12.0 * d * d + 13.0 * d;
  const int64_t layers = std::max<int64_t>(1, std::llround((target - (vocab + ctx) * d) / per_layer));
  std::vector<std::vector<int64_t>> s = {{vocab, d}, {ctx, d}};
  for (int64_t l = 0; l < layers; ++l) {
    for (auto shape : std::vector<std::vector<int64_t>>{{d}, {d}, {3 * d, d}, {3 * d}, {d, d}, {d}, {d}, {d},
                                                        {4 * d, d}, {4 * d}, {d, 4 * d}, {d}})
      s.push_back(shape);
  }
  s.push_back({d});
  s.push_back({d});
  return s;
}

// The bandwidth loop, vectorised as wide as the fused step's loops are (the widest this CPU has).
__attribute__((target_clones("avx512f", "avx2", "default")))
void add_grad(float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    p[i] += g[i];
    m[i] += g[i];
    v[i] += g[i];
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"AdamW's step on the CPU: xlaunch's fused step, LibTorch's, and a copy of the same bytes"};
  std::string system = "fused";
  double params_m = 10;
  int threads = 1, steps = 20;
  std::string dtype = "float32";
  app.add_option("--system", system, "fused, libtorch or stream")->check(CLI::IsMember({"fused", "libtorch", "stream"}));
  app.add_option("--params_m", params_m, "million parameters (about)");
  app.add_option("--threads", threads, "intra-op threads");
  app.add_option("--steps", steps, "timed steps");
  app.add_option("--dtype", dtype, "the parameters' type: float32 or bfloat16")->check(CLI::IsMember({"float32", "bfloat16"}));
  CLI11_PARSE(app, argc, argv);
  at::set_num_threads(threads);
  torch::manual_seed(0);
  std::vector<at::Tensor> params;
  int64_t n = 0;
  for (const auto& shape : gpt_shapes(params_m)) {
    const at::ScalarType type = dtype == "bfloat16" && system != "stream" ? at::kBFloat16 : at::kFloat;
    at::Tensor p = (at::randn(shape) * 0.02).to(type);
    p.mutable_grad() = (at::randn(shape) * 1e-3).to(type);
    n += p.numel();
    params.push_back(p);
  }
  torch::optim::AdamW opt(params, torch::optim::AdamWOptions(1e-4).weight_decay(0.1));
  std::vector<at::Tensor> ms, vs;
  if (system == "stream")
    for (const auto& p : params) {
      ms.push_back(at::randn(p.sizes()));
      vs.push_back(at::randn(p.sizes()));
    }
  // In chunks of every tensor, as the fused step divides its work.
  std::vector<std::pair<size_t, int64_t>> chunks;
  if (system == "stream")
    for (size_t k = 0; k < params.size(); ++k)
      for (int64_t b = 0; b < params[k].numel(); b += 16384) chunks.emplace_back(k, b);
  auto stream = [&] {
    at::parallel_for(0, static_cast<int64_t>(chunks.size()), 1, [&](int64_t lo, int64_t hi) {
      for (int64_t c = lo; c < hi; ++c) {
        const auto [k, b] = chunks[static_cast<size_t>(c)];
        add_grad(params[k].data_ptr<float>() + b, params[k].grad().const_data_ptr<float>() + b,
                 ms[k].data_ptr<float>() + b, vs[k].data_ptr<float>() + b, std::min<int64_t>(16384, params[k].numel() - b));
      }
    });
  };
  auto step = [&] {
    if (system == "fused") xlaunch::optim::fused_step(opt);
    else if (system == "libtorch") opt.step();
    else stream();
  };
  for (int i = 0; i < 2; ++i) step();
  std::vector<double> times;
  for (int i = 0; i < steps; ++i) times.push_back(xlaunch::bench::seconds_of(step));
  const double s = xlaunch::bench::median(times);
  const double bytes = dtype == "float32" || system == "stream" ? 28.0 : system == "fused" ? 30.0 : 14.0;
  std::printf("bench=optim_one system=%s params_m=%.1f tensors=%zu threads=%d dtype=%s bytes_per_param=%.0f "
              "ms_per_step=%.3f gbps=%.2f\n",
              system.c_str(), n / 1e6, params.size(), threads, dtype.c_str(), bytes, s * 1e3, bytes * n / s / 1e9);
  return 0;
}
