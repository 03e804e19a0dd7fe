// xlaunch's side of scripts/bench/augment.sh: samples per second of the guide's augmentation
// pipeline, an augment::Sequential on one CPU batch.
//
//   bench_augment --batch B --size S --threads T --seconds X [--per_transform] [--colour_aten] [--grid_path]
//       prints: xlaunch_samples_per_s=X
//       and with --per_transform one line per transform alone: transform=NAME xlaunch_samples_per_s=X
//
// The pipeline, every transform with p = 1, as Kornia's keyword arguments (augment_peers.py has
// the same for Kornia and torchvision):
//   ColorJitter(brightness=0.4, contrast=0.4, saturation=0.4, hue=0.1)
//   RandomAffine(degrees=15, translate=(0.1, 0.1), scale=(0.9, 1.1), shear=5)
//   RandomPerspective(distortion_scale=0.5)
// on a float32 [B, 3, S, S] batch in [0, 1], with at::set_num_threads(T). Each call is a new batch
// key (ids i*B .. i*B + B-1 of call i), so the draws are counted too. After one warm-up call,
// calls are timed until X seconds have passed (at least two). --colour_aten: ColorJitter through
// its batched ATen steps instead of the fused CPU loop (what the fused loop is measured against).
// --grid_path: the geometric transforms through the grid path other devices take (ATen's
// affine_grid_generator and grid_sampler_2d) instead of the CPU warp kernel.
#include <ATen/Parallel.h>
#include <ATen/ops/rand.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "augment/colour_kernels.h"
#include "augment/warp.h"
#include "bench_timing.h"
#include "xlaunch/augment.h"

namespace {

namespace aug = xlaunch::augment;
using xlaunch::bench::Clock;

struct Args {
  int64_t batch = 128;
  int64_t size = 32;
  int threads = 2;
  double seconds = 2;
  bool per_transform = false;
  bool colour_aten = false;
  bool grid_path = false;
};

Args parse(int argc, char** argv) {
  Args a;
  CLI::App app{"xlaunch's side of scripts/bench/augment.sh: samples per second of the guide's pipeline"};
  app.add_option("--batch", a.batch, "Images per batch")->check(CLI::Range(1, 1 << 20));
  app.add_option("--size", a.size, "Height and width of the images")->check(CLI::Range(1, 1 << 14));
  app.add_option("--threads", a.threads, "at::set_num_threads")->check(CLI::Range(1, 1024));
  app.add_option("--seconds", a.seconds, "Seconds to time each measurement")->check(CLI::Range(0.01, 3600.0));
  app.add_flag("--per_transform", a.per_transform, "Also time each transform alone");
  app.add_flag("--colour_aten", a.colour_aten, "ColorJitter through its batched ATen steps");
  app.add_flag("--grid_path", a.grid_path, "The geometric transforms through the grid path");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e));
  }
  return a;
}

// ColorJitter whose apply() runs the batched ATen steps on the CPU too.
class AtenColorJitter final : public aug::Transform {
 public:
  explicit AtenColorJitter(std::shared_ptr<aug::Transform> jitter) : jitter_(std::move(jitter)) {}
  std::string name() const override { return "ColorJitter"; }
  std::vector<std::string> columns() const override { return jitter_->columns(); }
  const aug::Options& options() const override { return jitter_->options(); }
  void sample(xlaunch::Rng& rng, int64_t h, int64_t w, double* v) const override { jitter_->sample(rng, h, w, v); }
  at::Tensor apply(const at::Tensor& images, const aug::Params& params) const override {
    aug::check_apply(*this, images, params, {3});
    return aug::detail::color_jitter_aten(images, params);
  }
  bool row_by_row() const override { return true; }

 private:
  std::shared_ptr<aug::Transform> jitter_;
};

std::vector<std::shared_ptr<aug::Transform>> guide_pipeline(bool colour_aten) {
  std::shared_ptr<aug::Transform> jitter = aug::make(
      "ColorJitter", {{"brightness", {0.4}}, {"contrast", {0.4}}, {"saturation", {0.4}}, {"hue", {0.1}}, {"p", {1}}});
  if (colour_aten) jitter = std::make_shared<AtenColorJitter>(jitter);
  return {jitter,
          aug::make("RandomAffine",
                    {{"degrees", {15}}, {"translate", {0.1, 0.1}}, {"scale", {0.9, 1.1}}, {"shear", {5}}, {"p", {1}}}),
          aug::make("RandomPerspective", {{"distortion_scale", {0.5}}, {"p", {1}}})};
}

double samples_per_s(const aug::Sequential& pipeline, const Args& a) {
  const at::Tensor images = at::rand({a.batch, 3, a.size, a.size});
  int64_t call = 0;
  const auto once = [&] {
    aug::BatchKey key{29, 0, std::vector<int64_t>(a.batch)};
    for (int64_t r = 0; r < a.batch; ++r) key.ids[r] = call * a.batch + r;
    ++call;
    return pipeline(images, key);
  };
  once();
  int64_t n = 0;
  const Clock::time_point t0 = Clock::now();
  double elapsed = 0;
  while (n < 2 || elapsed < a.seconds) {
    once();
    ++n;
    elapsed = xlaunch::bench::seconds_since(t0);
  }
  return static_cast<double>(n * a.batch) / elapsed;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  aug::detail::force_grid_path = a.grid_path;
  try {
    at::set_num_threads(a.threads);
    const std::vector<std::shared_ptr<aug::Transform>> transforms = guide_pipeline(a.colour_aten);
    std::printf("xlaunch_samples_per_s=%.1f\n", samples_per_s(aug::Sequential(transforms), a));
    if (a.per_transform) {
      for (const auto& t : transforms) {
        std::printf("transform=%s xlaunch_samples_per_s=%.1f\n", t->name().c_str(),
                    samples_per_s(aug::Sequential({t}), a));
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_augment: %s\n", e.what());
    return 1;
  }
}
