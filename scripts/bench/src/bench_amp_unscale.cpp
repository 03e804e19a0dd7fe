// Bandwidth of the fused unscale + non-finite check (xlaunch::unscale_and_check_, one launch
// over all tensors) on the float32 gradients of a ResNet-50 (161 tensors, 25.6 M parameters),
// against a device-to-device copy of the same bytes and against PyTorch's
// at::_amp_foreach_non_finite_check_and_unscale_. Rounds alternate between the three; the
// median round of each is reported. Bandwidth counts bytes read plus bytes written (2 x bytes
// for all three: the unscale reads and writes every gradient, the copy reads one buffer and
// writes another). Each unscale call includes making its zeroed found-inf flag, as a scaler must
// every step. inv_scale alternates 0.5 and 2, so values stay exact and every call writes.
//
//   bench_amp_unscale [--devices cpu,cuda] [--iters N] [--cpu_iters N] [--rounds R]
// prints per device
//   bench=amp_unscale device=D bytes=N gbps=X copy_gbps=Y torch_gbps=Z check=ok|FAILED
// and the ratios; for cuda without a GPU, one line saying it skipped. On the CPU the fused pass is
// the kernels/ reference (one thread, the caller's); copy_ and torch's op may use every core.
#include <ATen/ops/_amp_foreach_non_finite_check_and_unscale.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/zeros.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench_timing.h"
#include "xlaunch/grad_scaler.h"

namespace {

// Parameter shapes of torchvision's resnet50, in registration order.
std::vector<std::vector<int64_t>> resnet50_shapes() {
  std::vector<std::vector<int64_t>> s;
  auto conv = [&](int64_t out, int64_t in, int64_t k) { s.push_back({out, in, k, k}); };
  auto bn = [&](int64_t c) {
    s.push_back({c});
    s.push_back({c});
  };
  conv(64, 3, 7);
  bn(64);
  int64_t in = 64;
  const int64_t widths[] = {64, 128, 256, 512}, blocks[] = {3, 4, 6, 3};
  for (int l = 0; l < 4; ++l)
    for (int b = 0; b < blocks[l]; ++b) {
      const int64_t w = widths[l];
      conv(w, in, 1), bn(w);
      conv(w, w, 3), bn(w);
      conv(4 * w, w, 1), bn(4 * w);
      if (b == 0) conv(4 * w, in, 1), bn(4 * w);
      in = 4 * w;
    }
  s.push_back({1000, 2048});
  s.push_back({1000});
  return s;
}

// One device's measurement and line; returns the correctness check.
bool bench(c10::Device device, int iters, int rounds) {
  const bool cuda = device.is_cuda();
  auto sync = [&] {
    if (cuda) torch::cuda::synchronize();
  };
  const auto opts = at::TensorOptions().device(device).dtype(at::kFloat);
  std::vector<at::Tensor> grads, torch_grads;
  int64_t numel = 0;
  for (const auto& shape : resnet50_shapes()) {
    grads.push_back(at::randn(shape, opts));
    torch_grads.push_back(grads.back().clone());
    numel += grads.back().numel();
  }
  const std::vector<at::Tensor> originals = [&] {
    std::vector<at::Tensor> c;
    for (const auto& g : grads) c.push_back(g.clone());
    return c;
  }();
  const int64_t bytes = numel * 4;
  at::Tensor src = at::randn({numel}, opts), dst = at::empty({numel}, opts);
  const at::Tensor torch_inv[2] = {at::full({1}, 0.5, opts), at::full({1}, 2.0, opts)};

  // Randn gradients are finite: the flag must say so (checked outside the timed loops).
  const bool found_any = xlaunch::unscale_and_check_(grads, 0.5).item<float>() != 0 ||
                         xlaunch::unscale_and_check_(grads, 2.0).item<float>() != 0;
  const std::vector<std::function<void(int)>> systems = {
      [&](int i) { xlaunch::unscale_and_check_(grads, i % 2 ? 2.0 : 0.5); },
      [&](int) { dst.copy_(src); },
      [&](int i) {
        at::Tensor f = at::zeros({1}, opts);
        at::_amp_foreach_non_finite_check_and_unscale_(torch_grads, f, torch_inv[i % 2]);
      },
  };
  std::vector<std::vector<double>> gbps(systems.size());
  for (int round = -1; round < rounds; ++round)  // round -1 warms up
    for (size_t s = 0; s < systems.size(); ++s) {
      sync();
      const double t = xlaunch::bench::seconds_of([&] {
        for (int i = 0; i < iters; ++i) systems[s](i);
        sync();
      });
      if (round >= 0) gbps[s].push_back(2.0 * bytes * iters / t / 1e9);
    }

  // Every call ran an even number of times per round: the values must be back where they began.
  bool ok = !found_any;
  for (size_t i = 0; i < grads.size(); ++i) ok = ok && grads[i].equal(originals[i]) && torch_grads[i].equal(originals[i]);
  using xlaunch::bench::median;
  const double ours = median(gbps[0]), copy = median(gbps[1]), theirs = median(gbps[2]);
  const char* name = cuda ? "cuda" : "cpu";
  std::printf("bench=amp_unscale device=%s bytes=%lld gbps=%.1f copy_gbps=%.1f torch_gbps=%.1f check=%s\n", name,
              static_cast<long long>(bytes), ours, copy, theirs, ok ? "ok" : "FAILED");
  std::printf("bench=amp_unscale device=%s ratio xlaunch/copy=%.3f xlaunch/torch=%.3f tensors=%zu\n", name,
              ours / copy, ours / theirs, grads.size());
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 200, cpu_iters = 10, rounds = 7;
  std::string devices = "cuda";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--iters") iters = std::stoi(argv[i + 1]);
    else if (k == "--cpu_iters") cpu_iters = std::stoi(argv[i + 1]);
    else if (k == "--rounds") rounds = std::stoi(argv[i + 1]);
    else if (k == "--devices") devices = argv[i + 1];
  }
  // Pairs of (0.5, 2): the values return to where they began.
  iters += iters % 2;
  cpu_iters += cpu_iters % 2;
  bool ok = true;
  if (devices.find("cpu") != std::string::npos) ok = bench(c10::Device(c10::kCPU), cpu_iters, rounds) && ok;
  if (devices.find("cuda") != std::string::npos) {
    if (torch::cuda::is_available()) ok = bench(c10::Device(c10::kCUDA, 0), iters, rounds) && ok;
    else std::printf("bench=amp_unscale device=cuda skipped: no CUDA device (torch::cuda::is_available() is false)\n");
  }
  return ok ? 0 : 1;
}
