// One data-parallel step through the installed runtime. Each rank's loss is weight * (rank + 1),
// so its gradient is rank + 1 and the averaged one is (world + 1) / 2; from weight 1 and lr 1,
// every rank must end at 1 - (world + 1) / 2, whatever the world size.
#include <torch/torch.h>

#include <cstdio>

#include "installed_headers.h"  // every installed xlaunch header, written by the test
#include "xlaunch/accelerator.h"

int main() {
  xlaunch::Accelerator acc;
  torch::nn::Linear linear(torch::nn::LinearOptions(1, 1).bias(false));
  {
    torch::NoGradGuard no_grad;
    linear->weight.fill_(1.0);
  }
  auto model = acc.prepare(linear);
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(1.0));
  auto& opt = acc.prepare(sgd);

  const int rank = acc.process_index(), world = acc.num_processes();
  const auto x = torch::full({1, 1}, static_cast<float>(rank + 1), torch::TensorOptions().device(acc.device()));
  acc.backward(model(x).sum());
  opt.step();

  const double got = model->weight.item<double>();
  const double want = 1.0 - (world + 1) / 2.0;
  std::printf("outside: rank %d of %d weight %g expected %g: %s\n", rank, world, got, want,
              got == want ? "ok" : "WRONG");
  return got == want ? 0 : 1;
}
