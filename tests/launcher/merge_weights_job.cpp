// A small job for merge_weights_test.py: two prepared models (the first with BatchNorm, so its
// checkpoint holds buffers too, one of them int64), trained a few steps on every rank's own data,
// then saved with save_state. `xlaunch merge-weights` then turns the checkpoint into safetensors.
//
//   merge_weights_job --save DIR [--steps N] [--model_out DIR] [--big_width W]
// --model_out: also model 0's weights as safetensors through acc.save_model (the model as trained).
// --big_width: instead, one model of four bias-free Linear(W, W) (4 W^2 fp32 parameters, each
// layer a unit at stage 3: W = 8192 is 1 GiB), trained with plain SGD: the streaming export's
// memory check.
// Settings (zero stage, mixed precision...) come from the XLAUNCH_* environment.
#include <torch/torch.h>

#include "test_args.h"
#include "xlaunch/accelerator.h"

namespace {

// The checkpoint, and `model`'s weights as safetensors when model_out is given.
template <typename Model>
int save_all(xlaunch::Accelerator& acc, const Model& model, const std::string& save, const std::string& model_out) {
  acc.save_state(save);
  if (!model_out.empty()) acc.save_model(model, model_out);
  acc.print("saved ", save, " at step ", acc.step());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const auto args = xlaunch::test::parse_args(argc, argv);
  const std::string save = xlaunch::test::get(args, "--save");
  const int64_t steps = std::stoll(xlaunch::test::get(args, "--steps", "3"));
  const std::string model_out = xlaunch::test::get(args, "--model_out");
  if (save.empty()) {
    std::fprintf(stderr, "usage: merge_weights_job --save DIR [--steps N]\n");
    return 2;
  }
  const int64_t big = std::stoll(xlaunch::test::get(args, "--big_width", "0"));
  xlaunch::Accelerator acc;
  acc.set_seed(11);
  if (big > 0) {
    torch::nn::Sequential body;
    for (int i = 0; i < 4; ++i) body->push_back(torch::nn::Linear(torch::nn::LinearOptions(big, big).bias(false)));
    auto model = acc.prepare(body);
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(1e-3));
    auto& opt = acc.prepare(sgd);
    torch::Generator gen = at::detail::createCPUGenerator(100 + acc.process_index());
    for (int64_t s = 0; s < steps; ++s) {
      acc.backward(model(torch::randn({2, big}, gen)).pow(2).mean());
      opt.step();
      opt.zero_grad();
    }
    return save_all(acc, model, save, model_out);
  }
  torch::nn::Sequential body(torch::nn::Linear(8, 16), torch::nn::BatchNorm1d(16), torch::nn::ReLU(),
                             torch::nn::Linear(16, 4));
  torch::nn::Linear head(4, 3);
  auto m0 = acc.prepare(body);
  auto m1 = acc.prepare(head);
  torch::optim::SGD sgd0(m0->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::optim::Adam adam1(m1->parameters(), torch::optim::AdamOptions(1e-2));
  auto& opt0 = acc.prepare(sgd0);
  auto& opt1 = acc.prepare(adam1);
  torch::Generator gen = at::detail::createCPUGenerator(100 + acc.process_index());
  for (int64_t s = 0; s < steps; ++s) {
    const auto x = torch::randn({6, 8}, gen);
    const auto y = torch::randn({6, 3}, gen);
    acc.backward(torch::mse_loss(m1(m0(x)), y));
    opt0.step();
    opt1.step();
    opt0.zero_grad();
    opt1.zero_grad();
  }
  return save_all(acc, m0, save, model_out);
}
