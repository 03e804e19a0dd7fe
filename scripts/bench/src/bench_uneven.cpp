// Training steps per second of the benchmark MLP over a prepared loader whose ranks have shards of
// different sizes (uneven inputs: ranks whose data ends first join the others, Accelerator::join),
// or all of the mean size (--skew 0). Rank r of W holds mean * (1 + skew * (1/2 - r/(W-1))) batches,
// so the largest and smallest shards differ by skew times the mean. A step is one optimizer step of
// the job (the longest shard's batch count per epoch, joined ranks shadowing); the first epoch is
// warm-up. Prints on rank 0: xlaunch-uneven world=W skew=S steps_per_s=X epochs=E
//   --skew S  --mean_batches N  --batch B  --hidden H  --epochs E  --cpu_allreduce auto|mpi
#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>

#include <ATen/ops/randn.h>

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
  double skew = 0.3;
  int mean_batches = 100, batch = 32, hidden = 512, epochs = 4;
  xlaunch::AcceleratorOptions options = xlaunch::AcceleratorOptions::from_env();
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--skew") skew = std::stod(argv[i + 1]);
    else if (k == "--mean_batches") mean_batches = std::stoi(argv[i + 1]);
    else if (k == "--batch") batch = std::stoi(argv[i + 1]);
    else if (k == "--hidden") hidden = std::stoi(argv[i + 1]);
    else if (k == "--epochs") epochs = std::stoi(argv[i + 1]);
    else if (k == "--cpu_allreduce") options.cpu_allreduce = argv[i + 1];
    else { std::fprintf(stderr, "unknown option %s\n", k.c_str()); return 2; }
  }
  xlaunch::Accelerator acc(options);
  const int w = acc.num_processes(), r = acc.process_index();
  const double share = w == 1 ? 0.0 : 0.5 - static_cast<double>(r) / (w - 1);
  const auto batches = static_cast<int64_t>(std::lround(mean_batches * (1.0 + skew * share)));
  const int64_t longest = static_cast<int64_t>(std::lround(mean_batches * (1.0 + skew * (w == 1 ? 0.0 : 0.5))));

  torch::manual_seed(0);
  xlaunch::bench::Mlp net(hidden);
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  auto model = acc.prepare(net);
  auto& opt = acc.prepare(sgd);
  torch::manual_seed(r);
  xlaunch::LoaderOptions lo;
  lo.batch_size = batch;
  lo.num_workers = 0;
  lo.already_sharded = true;
  lo.even_batches = false;
  xlaunch::Loader& loader = acc.prepare(xlaunch::Loader(std::make_shared<RandomRows>(batches * batch, r), lo));

  auto epoch = [&] {
    for (auto& b : loader) {
      acc.backward(torch::nn::functional::cross_entropy(model(b.data), b.target));
      opt.step();
      opt.zero_grad();
    }
  };
  epoch();  // warm-up
  acc.wait_for_everyone();
  const double s = xlaunch::bench::seconds_of([&] {
    for (int e = 1; e < epochs; ++e) epoch();
    acc.wait_for_everyone();
  });
  if (acc.is_main_process())
    std::printf("xlaunch-uneven world=%d skew=%.2f steps_per_s=%.2f epochs=%d steps_per_epoch=%lld\n", w, skew,
                static_cast<double>(longest * (epochs - 1)) / s, epochs - 1, static_cast<long long>(longest));
  return 0;
}
