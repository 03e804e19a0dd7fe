// Trains a small MLP with dropout through the Accelerator (prepared model, optimizer and shuffled
// loader), stopping, saving, resuming and dying on command, so that checkpoint_resume_test.sh can
// compare a run that stopped and resumed in a fresh process with one that ran straight through.
//
//   train_resume --epochs E --out PARAMS                    straight through; rank 0 writes the
//                                                           final parameters' bytes to PARAMS
//   ... --save DIR --stop-after-epochs N                    save_state after epoch N, then exit
//   ... --save DIR --stop-after-batches K                   save_state after K batches of this run
//   ... --resume DIR                                        load_state first
//   ... --kill-at EVENT                                     SIGKILL the rank that reaches a save_state event
//                                                           (checkpoint.h: "wrote rank0/model_0.pt")
//   ... --optimizer adam   --hidden H                       Adam instead of SGD with momentum;
//                                                           another hidden width (another model)
//   ... --batch B                                           batch per rank (8)
// Errors go to stderr and exit 1, like any program using the runtime.
#include <torch/torch.h>

#include <csignal>
#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <string>

#include "synthetic_dataset.h"
#include "test_args.h"
#include "xlaunch/accelerator.h"
#include "state/checkpoint_dir.h"

namespace {

using xlaunch::test::get;

void write_params(const torch::nn::Module& m, const std::string& path) {
  std::ofstream out(path, std::ios::binary);
  for (const auto& p : m.named_parameters()) {
    const at::Tensor t = p.value().detach().to(at::kCPU).contiguous();  // the GPU's bytes are not the host's
    out << p.key() << "\n";
    out.write(static_cast<const char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
  }
}

int run(const std::map<std::string, std::string>& args) {
  const int64_t epochs = std::stoll(get(args, "--epochs", "2"));
  const int64_t hidden = std::stoll(get(args, "--hidden", "32"));
  const std::string save = get(args, "--save"), resume = get(args, "--resume"), out = get(args, "--out");
  const int64_t stop_epochs = std::stoll(get(args, "--stop-after-epochs", "0"));
  const int64_t stop_batches = std::stoll(get(args, "--stop-after-batches", "0"));
  const std::string kill_at = get(args, "--kill-at");
  if (!kill_at.empty())
    xlaunch::checkpoint::set_save_hook([kill_at](const std::string& event) {
      if (event == kill_at) std::raise(SIGKILL);
    });

  xlaunch::Accelerator acc;
  acc.set_seed(1234, /*device_specific=*/true);  // dropout masks differ per rank
  torch::nn::Sequential net(torch::nn::Linear(8, hidden), torch::nn::ReLU(), torch::nn::Dropout(0.3),
                            torch::nn::Linear(hidden, 4));
  auto model = acc.prepare(net);
  std::unique_ptr<torch::optim::Optimizer> inner;
  if (get(args, "--optimizer", "sgd") == "adam")
    inner = std::make_unique<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(1e-2));
  else
    inner = std::make_unique<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  auto& opt = acc.prepare(*inner);
  xlaunch::LoaderOptions lo;
  lo.batch_size = std::stoll(get(args, "--batch", "8"));  // per rank
  lo.seed = 7;
  lo.num_workers = 2;
  auto& loader = acc.prepare(xlaunch::Loader(xlaunch::test::Synthetic(120), lo));
  if (!resume.empty()) acc.load_state(resume);

  int64_t batches = 0;
  for (int64_t epoch = loader.epoch(); epoch < epochs; ++epoch) {
    net->train();
    for (auto& batch : loader) {
      acc.accumulate();
      auto loss = torch::nn::functional::cross_entropy(model(batch.data), batch.target);
      acc.backward(loss);
      opt.step();
      opt.zero_grad();
      if (++batches == stop_batches) {
        acc.save_state(save);
        acc.print("saved ", save, " at epoch ", epoch, " batch ", batch.index + 1, " step ", acc.step());
        return 0;
      }
    }
    if (epoch + 1 == stop_epochs) {
      acc.save_state(save);
      acc.print("saved ", save, " after epoch ", epoch, " step ", acc.step());
      return 0;
    }
  }
  if (acc.is_main_process() && !out.empty()) write_params(*net, out);
  acc.print("done: step ", acc.step());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(xlaunch::test::parse_args(argc, argv));
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return 1;
  }
}
