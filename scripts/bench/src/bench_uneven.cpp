// Training steps per second of the benchmark MLP over a prepared loader whose ranks have shards of
// different sizes (uneven inputs: ranks whose data ends first join the others, Accelerator::join).
// Rank r of W holds mean * (1 + skew * (1/2 - r/(W-1))) batches, so the largest and smallest shards
// differ by skew times the mean. A step is one optimizer step of the job (the longest shard's batch
// count per epoch, joined ranks shadowing); the first epoch is warm-up.
// --even_like S is the baseline of the --skew S job: even shards holding the same samples in the
// same number of steps (the longest shard's), per-rank batches of ceil(samples / W / steps) with
// the last one short, so a join that costs nothing runs as fast as this.
// Prints on rank 0, counting what the timed epochs ran (steps on rank 0, samples over all ranks):
//   xlaunch-uneven world=W skew=S steps_per_s=X epochs=E steps_per_epoch=N samples_per_epoch=M batch=B
//   --skew S | --even_like S  --mean_batches N  --batch B  --hidden H  --epochs E  --cpu_allreduce auto|mpi
#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>

#include <ATen/ops/randn.h>
#include <ATen/ops/scalar_tensor.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "bench_model.h"
#include "bench_timing.h"
#include "xlaunch/accelerator.h"

namespace {

// n samples of 784 random features and a label, made once (the loader's cost is not measured here).
struct RandomRows : xlaunch::RowDataset {
  RandomRows(int64_t n, int rank) : features(at::randn({n, 784})) { (void)rank; }
  int64_t size() const override { return features.size(0); }
  Layout layout() const override { return Layout{{784}, at::kFloat, true, {}, at::kLong}; }
  void write(int64_t index, void* data_row, void* target_row) const override {
    std::memcpy(data_row, features[index].data_ptr<float>(), 784 * sizeof(float));
    *static_cast<int64_t*>(target_row) = index % 10;
  }
  at::Tensor features;
};

}  // namespace

int main(int argc, char** argv) {
  double skew = 0.3, even_like = -1;
  int mean_batches = 100, batch = 32, hidden = 512, epochs = 4;
  xlaunch::AcceleratorOptions options = xlaunch::AcceleratorOptions::from_env();
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--skew") skew = std::stod(argv[i + 1]);
    else if (k == "--even_like") even_like = std::stod(argv[i + 1]);
    else if (k == "--mean_batches") mean_batches = std::stoi(argv[i + 1]);
    else if (k == "--batch") batch = std::stoi(argv[i + 1]);
    else if (k == "--hidden") hidden = std::stoi(argv[i + 1]);
    else if (k == "--epochs") epochs = std::stoi(argv[i + 1]);
    else if (k == "--cpu_allreduce") options.cpu_allreduce = argv[i + 1];
    else { std::fprintf(stderr, "unknown option %s\n", k.c_str()); return 2; }
  }
  xlaunch::Accelerator acc(options);
  const int w = acc.num_processes(), r = acc.process_index();
  // The shard of rank q in the --skew S job, in batches; the job's steps per epoch are rank 0's.
  auto shard_batches = [&](double s, int q) {
    const double share = w == 1 ? 0.0 : 0.5 - static_cast<double>(q) / (w - 1);
    return static_cast<int64_t>(std::lround(mean_batches * (1.0 + s * share)));
  };
  int64_t samples = shard_batches(skew, r) * batch;
  int64_t rank_batch = batch;
  if (even_like >= 0) {
    int64_t total = 0;
    for (int q = 0; q < w; ++q) total += shard_batches(even_like, q) * batch;
    const int64_t steps = shard_batches(even_like, 0);
    samples = total / w;  // a whole number: the shards' deviations from the mean cancel
    rank_batch = (samples + steps - 1) / steps;
    skew = 0;
  }

  torch::manual_seed(0);
  xlaunch::bench::Mlp net(hidden);
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  auto model = acc.prepare(net);
  auto& opt = acc.prepare(sgd);
  torch::manual_seed(r);
  xlaunch::LoaderOptions lo;
  lo.batch_size = rank_batch;
  lo.num_workers = 0;
  lo.already_sharded = true;
  lo.even_batches = false;
  xlaunch::Loader& loader = acc.prepare(xlaunch::Loader(std::make_shared<RandomRows>(samples, r), lo));

  int64_t steps = 0, seen = 0;  // rank 0's loop iterations, this rank's samples
  auto epoch = [&] {
    for (auto& b : loader) {
      acc.backward(torch::nn::functional::cross_entropy(model(b.data), b.target));
      opt.step();
      opt.zero_grad();
      ++steps;
      seen += b.size();
    }
  };
  epoch();  // warm-up
  acc.wait_for_everyone();
  steps = seen = 0;
  const double s = xlaunch::bench::seconds_of([&] {
    for (int e = 1; e < epochs; ++e) epoch();
    acc.wait_for_everyone();
  });
  const auto all_seen = acc.reduce(at::scalar_tensor(static_cast<double>(seen), at::kFloat), xlaunch::ReduceOp::Sum);
  const double timed = epochs - 1;
  if (acc.is_main_process())
    std::printf("xlaunch-uneven world=%d skew=%.2f steps_per_s=%.2f epochs=%d steps_per_epoch=%.0f samples_per_epoch=%.0f "
                "batch=%lld\n", w, skew, static_cast<double>(steps) / s, epochs - 1, static_cast<double>(steps) / timed,
                all_seen.item<double>() / timed, static_cast<long long>(rank_batch));
  return 0;
}
