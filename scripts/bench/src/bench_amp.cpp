// Training steps per second of the benchmark MLP (784-H-H-10, ReLU, SGD momentum 0.9, cross
// entropy) in float32 against mixed precision, one model per precision, rounds alternating so
// both see the same machine noise; the median round of each is reported.
//
//   bench_amp [--device cpu|cuda] [--hidden H] [--batch B] [--steps S] [--rounds R]
//             [--precisions fp32,bf16[,fp16]]
// prints per precision:
//   bench=amp device=D precision=P hidden=H batch=B steps_per_s=X
// then each mixed precision's speed relative to fp32. fp16 steps through a GradScaler.
#include <ATen/ops/cross_entropy_loss.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <torch/cuda.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "bench_model.h"
#include "bench_timing.h"
#include "xlaunch/autocast.h"
#include "xlaunch/grad_scaler.h"

namespace {

struct Runner {
  std::string precision;
  xlaunch::MixedPrecision mp;
  xlaunch::bench::Mlp model{nullptr};
  std::unique_ptr<torch::optim::SGD> opt;
  std::unique_ptr<xlaunch::GradScaler> scaler;
  std::vector<double> rates;
};

}  // namespace

int main(int argc, char** argv) {
  std::string device_name = "cpu", precisions = "fp32,bf16";
  int64_t hidden = 1024, batch = 64;
  int steps = 40, rounds = 7;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--device") device_name = v;
    else if (k == "--hidden") hidden = std::stoll(v);
    else if (k == "--batch") batch = std::stoll(v);
    else if (k == "--steps") steps = std::stoi(v);
    else if (k == "--rounds") rounds = std::stoi(v);
    else if (k == "--precisions") precisions = v;
    else {
      std::fprintf(stderr, "bench_amp: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  const bool cuda = device_name == "cuda";
  if (cuda && !torch::cuda::is_available()) {
    std::printf("bench=amp device=cuda skipped: no CUDA device (torch::cuda::is_available() is false)\n");
    return 0;
  }
  const c10::Device device = cuda ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
  auto sync = [&] {
    if (cuda) torch::cuda::synchronize();
  };

  // A pool of synthetic batches already on the device: the loader is not what is measured.
  torch::manual_seed(1);
  std::vector<at::Tensor> xs, ys;
  for (int i = 0; i < 8; ++i) {
    xs.push_back(at::randn({batch, 784}).to(device));
    ys.push_back(at::randint(10, {batch}, at::kLong).to(device));
  }

  std::vector<Runner> runners;
  std::stringstream list(precisions);
  for (std::string p; std::getline(list, p, ',');) {
    Runner r;
    r.precision = p;
    r.mp = p == "fp32" ? xlaunch::MixedPrecision::No : xlaunch::parse_mixed_precision(p, "--precisions");
    torch::manual_seed(2);  // the same initial weights for every precision
    r.model = xlaunch::bench::Mlp(hidden);
    r.model->to(device);
    r.opt = std::make_unique<torch::optim::SGD>(r.model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
    xlaunch::GradScalerOptions so;
    so.enabled = xlaunch::needs_grad_scaler(r.mp);
    r.scaler = std::make_unique<xlaunch::GradScaler>(so);
    runners.push_back(std::move(r));
  }

  int64_t k = 0;
  auto run_steps = [&](Runner& r, int n) {
    for (int s = 0; s < n; ++s, ++k) {
      at::Tensor loss;
      {
        xlaunch::AutocastGuard guard(device.type(), r.mp);
        loss = at::cross_entropy_loss(r.model->forward(xs[k % xs.size()]), ys[k % ys.size()]);
      }
      r.opt->zero_grad();
      r.scaler->scale(loss).backward();
      r.scaler->step(*r.opt);
      r.scaler->update();
    }
    sync();
  };
  for (Runner& r : runners) run_steps(r, std::max(3, steps / 4));  // warm-up
  for (int round = 0; round < rounds; ++round)
    for (Runner& r : runners) {
      r.rates.push_back(steps / xlaunch::bench::seconds_of([&] { run_steps(r, steps); }));
    }

  std::map<std::string, double> rate;
  for (const Runner& r : runners) {
    rate[r.precision] = xlaunch::bench::median(r.rates);
    std::printf("bench=amp device=%s precision=%s hidden=%lld batch=%lld steps_per_s=%.2f\n", device_name.c_str(),
                r.precision.c_str(), static_cast<long long>(hidden), static_cast<long long>(batch), rate[r.precision]);
  }
  if (rate.count("fp32"))
    for (const Runner& r : runners)
      if (r.precision != "fp32")
        std::printf("bench=amp device=%s ratio %s/fp32=%.2f\n", device_name.c_str(), r.precision.c_str(),
                    rate[r.precision] / rate["fp32"]);
  return 0;
}
