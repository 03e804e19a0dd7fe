// Trains the benchmark MLP (bench_model.h) or the Fashion-MNIST CNN (examples/fashion_cnn.h) on one fixed
// batch with plain SGD, with the operator profile armed as the Accelerator arms it
// (op_profile.h), and leaves its table in DIR/ops-0.json with every row: the C++ half of
// op_profile_reference_test.py, whose Python half runs the same loop under torch.profiler.
//   op_profile_job --model mlp|cnn --dir DIR [--steps N] [--hidden H] [--batch B] [--threads T]
#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <limits>

#include "bench_model.h"
#include "fashion_cnn.h"
#include "profile/op_profile.h"
#include "xlaunch/status/step_stats.h"

int main(int argc, char** argv) {
  std::string model_name = "mlp", dir;
  int64_t steps = 5, hidden = 512, batch = 64;
  int threads = 1;
  CLI::App app{"The operator profile of one model's training steps, for the comparison with torch.profiler"};
  app.add_option("--model", model_name, "mlp or cnn")->check(CLI::IsMember({"mlp", "cnn"}));
  app.add_option("--dir", dir, "Where ops-0.json goes")->required();
  app.add_option("--steps", steps, "Steps profiled after the warm-up");
  app.add_option("--hidden", hidden, "The MLP's hidden width");
  app.add_option("--batch", batch, "Batch size");
  app.add_option("--threads", threads, "Intra-op threads (torch.set_num_threads)");
  CLI11_PARSE(app, argc, argv);

  at::set_num_threads(threads);
  torch::manual_seed(0);
  std::shared_ptr<torch::nn::Module> module;
  std::function<at::Tensor(const at::Tensor&)> forward;
  at::Tensor x;
  if (model_name == "mlp") {
    xlaunch::bench::Mlp m(hidden);
    module = m.ptr();
    forward = [m](const at::Tensor& in) mutable { return m(in); };
    x = torch::randn({batch, 784});
  } else {
    FashionCnn m;
    module = m.ptr();
    forward = [m](const at::Tensor& in) mutable { return m(in); };
    x = torch::rand({batch, 1, 28, 28});
  }
  const at::Tensor y = torch::randint(0, 10, {batch});
  torch::optim::SGD opt(module->parameters(), torch::optim::SGDOptions(0.01));

  xlaunch::profile::ops::Settings s;
  s.steps = steps;
  s.dir = dir;
  s.max_rows = std::numeric_limits<size_t>::max();
  xlaunch::profile::ops::arm(s);
  for (int64_t i = 0; i < xlaunch::profile::kWarmupSteps + steps; ++i) {
    opt.zero_grad();
    const at::Tensor loss = torch::nn::functional::cross_entropy(forward(x), y);
    loss.backward();
    opt.step();
    xlaunch::profile::ops::step_done();  // what the prepared optimizer's step does through the step clock
  }
  return 0;
}
