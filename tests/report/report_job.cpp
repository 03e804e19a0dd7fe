// A training job built to be slow in one chosen way, for the utilization report's tests
// (report_test.sh) and scripts/bench/advice.sh: a loader whose samples take time to make (--get_us:
// waiting, as on slow storage; with --burn, computing: that much CPU time each), a model with many
// parameters and a tiny batch (communication dominates), one rank that sleeps in every step
// (--straggler_rank, --straggler_ms), or none of these (balanced; --sleep_ms makes every rank's
// loop take that much longer without using a core, as a GPU's kernels would). --adamw steps AdamW
// instead of SGD: optimizer state for the report's ZeRO line (ddp.zero_stage).
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <ctime>
#include <memory>
#include <thread>

#include "xlaunch/accelerator.h"
#include "xlaunch/dataset.h"
#include "xlaunch/loader.h"

namespace {

// The calling thread's CPU time in nanoseconds.
int64_t thread_cpu_ns() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

// Sample i: `features` floats, all (i % 7) / 7, and target i % 10; making one takes get_us: asleep,
// or (burn) computing until the thread has used that much CPU time, however busy the cores are.
struct SlowRows : xlaunch::RowDataset {
  SlowRows(int64_t n, int64_t features, int get_us, bool burn) : n(n), features(features), get_us(get_us), burn(burn) {}
  int64_t size() const override { return n; }
  Layout layout() const override { return Layout{{features}, at::kFloat, true, {}, at::kLong}; }
  void write(int64_t index, void* data_row, void* target_row) const override {
    if (get_us > 0 && burn) {
      const int64_t until = thread_cpu_ns() + int64_t{get_us} * 1000;
      volatile double x = 1;
      while (thread_cpu_ns() < until)
        for (int k = 0; k < 1000; ++k) x = x * 1.0000001 + 1e-9;
    } else if (get_us > 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(get_us));
    }
    auto* d = static_cast<float*>(data_row);
    for (int64_t k = 0; k < features; ++k) d[k] = static_cast<float>(index % 7) / 7.0f;
    *static_cast<int64_t*>(target_row) = index % 10;
  }
  int64_t n, features;
  int get_us;
  bool burn;
};

}  // namespace

int main(int argc, char** argv) {
  int64_t steps = 60, hidden = 64, layers = 2, batch = 32, features = 32;
  int get_us = 0, straggler_rank = -1, straggler_ms = 0, sleep_ms = 0;
  std::string cpu_allreduce = "auto";
  bool adamw = false, burn = false;
  CLI::App app{"A job that is slow on purpose, for the utilization report's tests"};
  app.add_option("--steps", steps, "Optimizer steps");
  app.add_option("--hidden", hidden, "Width of the hidden layers");
  app.add_option("--layers", layers, "Hidden layers");
  app.add_option("--batch", batch, "Batch size per rank");
  app.add_option("--features", features, "Input features");
  app.add_option("--get_us", get_us, "Microseconds to make one sample (a slow read; with --burn, a slow transform)");
  app.add_flag("--burn", burn, "Samples take --get_us of CPU time each, computing, instead of waiting");
  app.add_option("--straggler_rank", straggler_rank, "This rank sleeps --straggler_ms in every step");
  app.add_option("--straggler_ms", straggler_ms, "Milliseconds the straggler sleeps per step");
  app.add_option("--sleep_ms", sleep_ms, "Milliseconds every rank sleeps per step, after backward");
  app.add_option("--cpu_allreduce", cpu_allreduce, "auto (shared memory on one machine) or mpi");
  app.add_flag("--adamw", adamw, "AdamW instead of SGD (without momentum: no state)");
  CLI11_PARSE(app, argc, argv);

  xlaunch::AcceleratorOptions ao = xlaunch::AcceleratorOptions::from_env();
  ao.cpu_allreduce = cpu_allreduce;
  xlaunch::Accelerator acc(ao);
  torch::nn::Sequential net;
  int64_t in = features;
  for (int64_t l = 0; l < layers; ++l) {
    net->push_back(torch::nn::Linear(in, hidden));
    net->push_back(torch::nn::ReLU());
    in = hidden;
  }
  net->push_back(torch::nn::Linear(in, 10));
  auto model = acc.prepare(net);
  std::unique_ptr<torch::optim::Optimizer> inner;
  if (adamw) inner = std::make_unique<torch::optim::AdamW>(net->parameters(), torch::optim::AdamWOptions(1e-3));
  else inner = std::make_unique<torch::optim::SGD>(net->parameters(), torch::optim::SGDOptions(0.01));
  auto& opt = acc.prepare(*inner);
  xlaunch::LoaderOptions lo = xlaunch::LoaderOptions::from_env();
  lo.batch_size = batch;
  auto& loader = acc.prepare(xlaunch::Loader(std::make_shared<SlowRows>(batch * acc.num_processes() * 50, features, get_us, burn), lo));

  int64_t done = 0;
  while (done < steps) {
    for (auto& b : loader) {
      if (done >= steps) break;
      auto loss = torch::nn::functional::cross_entropy(model(b.data), b.target);
      acc.backward(loss);
      if (sleep_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
      if (acc.process_index() == straggler_rank) std::this_thread::sleep_for(std::chrono::milliseconds(straggler_ms));
      opt.step();
      opt.zero_grad();
      ++done;
    }
  }
  acc.print("report_job: ", done, " steps");
  return 0;
}
