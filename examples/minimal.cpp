// The shortest complete data-parallel program: a LibTorch training loop on Fashion-MNIST, with
// the four Accelerator lines that make it run on 1 process, N processes or N GPUs unchanged.
//   xlaunch run -n 2 examples/minimal
#include <torch/torch.h>

#include "xlaunch/accelerator.h"
#include "xlaunch/fashion_mnist.h"

int main() {
  xlaunch::Accelerator acc;  // this process's place and settings, from `xlaunch run`
  auto model = acc.prepare(torch::nn::Sequential(torch::nn::Flatten(), torch::nn::Linear(784, 128), torch::nn::ReLU(),
                                                 torch::nn::Linear(128, 10)));
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  auto& opt = acc.prepare(sgd);
  auto lo = xlaunch::LoaderOptions::from_env();
  lo.batch_size = 64;  // per process
  auto& loader = acc.prepare(xlaunch::Loader(xlaunch::FashionMnist(xlaunch::FashionMnist::Split::Train), lo));
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (auto& batch : loader) {
      auto loss = torch::nn::functional::cross_entropy(model(batch.data), batch.target);
      acc.backward(loss);  // gradients averaged across processes
      opt.step();
      opt.zero_grad();
    }
    acc.print("epoch ", epoch, " done");
  }
}
