// Data loading for scripts/bench/loader.sh: xlaunch's loader over the dataset of the README's
// example, against peers/torch_loader_fmnist.py (torch.utils.data.DataLoader over the same work).
//
// Host path: the first N Fashion-MNIST training images (Debian's dataset-fashion-mnist), decoded
// from the IDX files once, each sample made by xlaunch::FashionMnist::get (its 784 bytes scaled to
// float in [0, 1]; label an int64 scalar), collated into shuffled batches of B, drop_last; the
// consumer sums each batch, as the peer does, and ATen's intra-op pool has one thread (the peer's
// torch.set_num_threads(1)). One epoch warms the loader up (its workers start, its memory is
// allocated) and is not timed; then E epochs are. dataset_us_per_batch is the dataset's own work
// for a batch: get() on B samples in a plain loop, no loader, timed in the same process; a loader's
// overhead per batch is us_per_batch less that (with 0 workers, where both run on one thread).
//
// Device path: a synthetic 3x64x64 uint8 image per sample (SplitMix64 seeded with its index), a
// random 56x56 crop, a random horizontal flip, conversion to float and per-channel normalisation,
// written straight into the sample's row of the collated batch (a RowDataset).
//
//   bench_loader --workers K [--samples N] [--batch B] [--epochs E] [--data_dir D]
//       prints: bench=loader system=xlaunch dataset=fashion_mnist workers=K batch=B samples_per_s=X
//               us_per_batch=T dataset_us_per_batch=W
//   bench_loader --device-path [--samples N] [--batch B] [--workers K]
//       where a GPU exists: batches/s delivered on the device with pin_memory on and off, and a
//       plain pinned host-to-device copy of the same bytes; elsewhere one line saying it skipped.
//   bench_loader --overlap [--batches N] [--rounds R] [--workers K]
//       where a GPU exists: how much of the loader's host-to-device copy hides behind compute
//       (scripts/gpu/run.sh): bench=gpu_loader h2d_overlap=R ..., R = (compute + copy - both) /
//       copy, each the best of R rounds; elsewhere one line saying it skipped.
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/zeros.h>
#include <torch/cuda.h>

#if XLAUNCH_HAVE_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>

#include "bench_timing.h"
#include "xlaunch/fashion_mnist.h"
#include "xlaunch/loader.h"

namespace {

using xlaunch::bench::Clock;
using xlaunch::bench::seconds_since;

constexpr int kC = 3, kH = 64, kW = 64, kCrop = 56;
constexpr float kMean[kC] = {0.485f, 0.456f, 0.406f};
constexpr float kStd[kC] = {0.229f, 0.224f, 0.225f};

// SplitMix64 (Steele, Lea, Flood 2014): a counter-based generator, cheap to seed per sample.
struct SplitMix64 {
  uint64_t state;
  uint64_t operator()() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
};

class AugmentedImages final : public xlaunch::RowDataset {
 public:
  explicit AugmentedImages(int64_t n) : n_(n) {
    // (v / 255 - mean) / std for every byte value: one table lookup per output pixel.
    for (int c = 0; c < kC; ++c)
      for (int v = 0; v < 256; ++v) lut_[c][v] = (static_cast<float>(v) / 255.0f - kMean[c]) / kStd[c];
  }
  int64_t size() const override { return n_; }
  Layout layout() const override { return Layout{{kC, kCrop, kCrop}, at::kFloat, true, {}, at::kLong}; }

  void write(int64_t index, void* data_row, void* target_row) const override {
    SplitMix64 rng{static_cast<uint64_t>(index)};
    alignas(64) uint8_t image[kC * kH * kW];
    for (int k = 0; k < kC * kH * kW; k += 8) {
      const uint64_t r = rng();
      std::memcpy(image + k, &r, 8);
    }
    const int top = static_cast<int>(rng() % (kH - kCrop + 1));
    const int left = static_cast<int>(rng() % (kW - kCrop + 1));
    const bool flip = (rng() >> 63) != 0;
    auto* out = static_cast<float*>(data_row);
    for (int c = 0; c < kC; ++c) {
      const float* lut = lut_[c];
      for (int y = 0; y < kCrop; ++y) {
        const uint8_t* src = image + (c * kH + top + y) * kW + left;
        float* dst = out + (c * kCrop + y) * kCrop;
        if (flip)
          for (int x = 0; x < kCrop; ++x) dst[x] = lut[src[kCrop - 1 - x]];
        else
          for (int x = 0; x < kCrop; ++x) dst[x] = lut[src[x]];
      }
    }
    *static_cast<int64_t*>(target_row) = index % 10;
  }

 private:
  int64_t n_;
  float lut_[kC][256];
};

struct Args {
  int workers = 2;
  int64_t samples = 20000;
  int64_t batch = 64;
  int epochs = 1;
  std::string data_dir = xlaunch::FashionMnist::kDefaultRoot;
  bool device_path = false;
  bool overlap = false;
  int64_t batches = 200;
  int rounds = 5;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_loader: %s needs a value\n", k.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (k == "--workers") a.workers = std::atoi(value());
    else if (k == "--samples") a.samples = std::atoll(value());
    else if (k == "--batch") a.batch = std::atoll(value());
    else if (k == "--epochs") a.epochs = std::atoi(value());
    else if (k == "--data_dir") a.data_dir = value();
    else if (k == "--device-path") a.device_path = true;
    else if (k == "--overlap") a.overlap = true;
    else if (k == "--batches") a.batches = std::atoll(value());
    else if (k == "--rounds") a.rounds = std::atoi(value());
    else {
      std::fprintf(stderr, "bench_loader: unknown argument %s\n", k.c_str());
      std::exit(2);
    }
  }
  return a;
}

xlaunch::LoaderOptions loader_options(const Args& a) {
  xlaunch::LoaderOptions o;
  o.batch_size = a.batch;
  o.num_workers = a.workers;
  o.prefetch_factor = 2;
  o.shuffle = true;
  o.drop_last = true;
  return o;
}

// The first n samples of Fashion-MNIST's training set.
class FashionMnistHead : public torch::data::datasets::Dataset<FashionMnistHead> {
 public:
  FashionMnistHead(xlaunch::FashionMnist base, size_t n) : base_(std::move(base)), n_(std::min(n, *base_.size())) {}
  torch::data::Example<> get(size_t i) override { return base_.get(i); }
  std::optional<size_t> size() const override { return n_; }

 private:
  xlaunch::FashionMnist base_;
  size_t n_;
};

int run_host(const Args& a) {
  const FashionMnistHead data(xlaunch::FashionMnist(xlaunch::FashionMnist::Split::Train, a.data_dir),
                              static_cast<size_t>(a.samples));
  xlaunch::Loader loader(data, loader_options(a));
  double checksum = 0;
  auto epoch = [&] {
    int64_t n = 0;
    for (auto& b : loader) {
      checksum += at::sum(b.data).item<double>();
      n += b.size();
    }
    return n;
  };
  epoch();  // warm-up, not timed
  int64_t n = 0;
  const auto t0 = Clock::now();
  for (int e = 0; e < a.epochs; ++e) n += epoch();
  const double s = seconds_since(t0);
  // The dataset's own work for as many samples, in a plain loop.
  FashionMnistHead bare = data;
  const int64_t size = static_cast<int64_t>(*bare.size());
  const auto t1 = Clock::now();
  for (int64_t i = 0; i < n; ++i) checksum += bare.get(static_cast<size_t>(i % size)).data.data_ptr<float>()[0];
  const double work = seconds_since(t1);
  const double batches = static_cast<double>(n) / static_cast<double>(a.batch);
  std::printf("bench=loader system=xlaunch dataset=fashion_mnist workers=%d batch=%lld samples_per_s=%.1f "
              "us_per_batch=%.2f dataset_us_per_batch=%.2f\n",
              a.workers, static_cast<long long>(a.batch), n / s, s / batches * 1e6, work / batches * 1e6);
  std::fprintf(stderr, "bench_loader: %lld samples in %.3f s, checksum %.6g\n", static_cast<long long>(n), s, checksum);
  return n > 0 ? 0 : 1;
}

int run_device(const Args& a) {
  if (!torch::cuda::is_available() || !XLAUNCH_HAVE_CUDA) {
    std::printf("bench=loader device=none skipped: %s\n",
                XLAUNCH_HAVE_CUDA ? "no CUDA device (torch::cuda::is_available() is false)"
                                  : "built without CUDA device paths");
    return 0;
  }
#if XLAUNCH_HAVE_CUDA
  const c10::Device dev(c10::kCUDA, 0);
  auto loader_rate = [&](bool pin) {
    auto o = loader_options(a);
    o.device = dev;
    o.pin_memory = pin;
    xlaunch::Loader loader(std::make_shared<AugmentedImages>(a.samples), o);
    int64_t batches = 0;
    const auto t0 = Clock::now();
    for (auto& b : loader) {
      b.data.sum();  // consumed on the device, on the current stream
      ++batches;
    }
    c10::cuda::device_synchronize();
    return batches / seconds_since(t0);
  };
  const double pinned = loader_rate(true);
  const double pageable = loader_rate(false);
  // The same bytes, already collated in one pinned buffer, copied as fast as the link allows.
  const at::Tensor host = at::empty({a.batch, kC, kCrop, kCrop}, at::TensorOptions().dtype(at::kFloat).pinned_memory(true));
  const int64_t batches = a.samples / a.batch;
  const auto t0 = Clock::now();
  for (int64_t k = 0; k < batches; ++k) host.to(at::TensorOptions().device(dev), /*non_blocking=*/true).sum();
  c10::cuda::device_synchronize();
  const double plain = batches / seconds_since(t0);
  std::printf("bench=loader device=%s workers=%d path=pin_memory_on batches_per_s=%.1f\n", dev.str().c_str(), a.workers, pinned);
  std::printf("bench=loader device=%s workers=%d path=pin_memory_off batches_per_s=%.1f\n", dev.str().c_str(), a.workers, pageable);
  std::printf("bench=loader device=%s path=plain_pinned_h2d_copy batches_per_s=%.1f\n", dev.str().c_str(), plain);
#endif
  return 0;
}

// Rows of 3x256x256 float (768 KiB) of which only the first value and the label are written: the
// host side of the loader then costs next to nothing, and what is measured is its device path:
// pinned staging, the copy on the loader's stream, and that copy's overlap with the consumer's work.
class SparseRows final : public xlaunch::RowDataset {
 public:
  static constexpr int64_t kSide = 256;
  explicit SparseRows(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  Layout layout() const override { return Layout{{kC, kSide, kSide}, at::kFloat, true, {}, at::kLong}; }
  void write(int64_t index, void* data_row, void* target_row) const override {
    *static_cast<float*>(data_row) = static_cast<float>(index);
    *static_cast<int64_t*>(target_row) = index % 10;
  }

 private:
  int64_t n_;
};

int run_overlap(const Args& a) {
  if (!torch::cuda::is_available() || !XLAUNCH_HAVE_CUDA) {
    std::printf("bench=gpu_loader skipped: %s\n", XLAUNCH_HAVE_CUDA ? "no CUDA device (torch::cuda::is_available() is false)"
                                                                    : "built without CUDA device paths");
    return 0;
  }
#if XLAUNCH_HAVE_CUDA
  const c10::Device dev(c10::kCUDA, 0);
  const auto on_dev = at::TensorOptions().device(dev);
  const int64_t side = SparseRows::kSide, n = a.batches;
  const at::Tensor host = at::empty({a.batch, kC, side, side}, at::TensorOptions().dtype(at::kFloat).pinned_memory(true));
  const at::Tensor resident = at::zeros({a.batch, kC, side, side}, on_dev);
  at::Tensor dst = at::empty_like(resident);
  // The consumer's work on a batch: k fp32 matrix products (compute-bound), then a read of the
  // batch, so the batch's copy must have landed before the step ends.
  const at::Tensor w = at::randn({2048, 2048}, on_dev);
  at::Tensor prod = at::empty_like(w), total = at::zeros({}, on_dev);
  int k = 1;
  auto compute = [&](const at::Tensor& batch) {
    for (int i = 0; i < k; ++i) at::mm_out(prod, w, w);
    total.add_(batch.sum());
  };
  auto best_of = [&](const std::function<void()>& body) {
    double best = 1e30;
    for (int r = 0; r < a.rounds; ++r) {
      c10::cuda::device_synchronize();
      const auto t0 = Clock::now();
      body();
      c10::cuda::device_synchronize();
      best = std::min(best, seconds_since(t0));
    }
    return best;
  };
  const double copy = best_of([&] {
    for (int64_t b = 0; b < n; ++b) dst.copy_(host, /*non_blocking=*/true);
  });
  // Size the compute to 1.5 x the copy: enough to hide it, near enough for a copy left in the open
  // to show (no overlap at all reads 0, a fully hidden copy 1).
  k = 1;
  const double one_mm = best_of([&] {
    for (int64_t b = 0; b < n; ++b) compute(resident);
  }) / static_cast<double>(n);
  k = std::max(1, static_cast<int>(std::lround(1.5 * copy / static_cast<double>(n) / one_mm)));
  const double alone = best_of([&] {
    for (int64_t b = 0; b < n; ++b) compute(resident);
  });
  auto o = loader_options(a);
  o.batch_size = a.batch;
  o.shuffle = false;
  o.device = dev;
  o.pin_memory = true;
  int64_t seen = 0;
  auto pipeline = [&] {
    xlaunch::Loader loader(std::make_shared<SparseRows>(n * a.batch), o);
    for (auto& b : loader) {
      compute(b.data);
      ++seen;
    }
  };
  pipeline();  // warm-up: the pinned blocks and the device memory are cached from here on
  seen = 0;
  const double both = best_of(pipeline);
  if (seen != n * a.rounds) throw std::runtime_error("the loader handed over " + std::to_string(seen) + " batches, expected " +
                                                     std::to_string(n * a.rounds));
  const double hidden = std::clamp((alone + copy - both) / copy, 0.0, 1.0);
  const double mib = static_cast<double>(host.nbytes()) / (1 << 20);
  std::printf("bench=gpu_loader h2d_overlap=%.3f copy_ms=%.2f compute_ms=%.2f loader_and_compute_ms=%.2f batches=%lld "
              "batch_mib=%.1f h2d_gbps=%.1f workers=%d\n",
              hidden, copy * 1e3, alone * 1e3, both * 1e3, static_cast<long long>(n), mib,
              static_cast<double>(host.nbytes()) * static_cast<double>(n) / copy / 1e9, a.workers);
#endif
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  at::set_num_threads(1);  // as the peer does: the loader's parallelism is its workers
  try {
    if (a.overlap) return run_overlap(a);
    return a.device_path ? run_device(a) : run_host(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_loader: %s\n", e.what());
    return 1;
  }
}
