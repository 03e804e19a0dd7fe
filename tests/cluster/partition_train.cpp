// A small data-parallel training loop for the partition checks of multimachine_test.sh: it trains
// until it is ended, optionally saving a checkpoint every few steps, and says (through files the
// test waits for) when it is well into training or inside a save.
//
//   partition_train --marker F                         rank 0 creates F after 20 steps; trains on
//   ... --save DIR --save_every K                      save_state(DIR) every K steps
//   ... --pause_in_save N                              rank 0 stays in the N-th save (after its files
//                                                      are written, before they replace the previous
//                                                      checkpoint) for 300 s, having created F.save
//   partition_train --resume DIR                       load_state(DIR), print its step, exit 0
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <string>
#include <thread>

#include "state/checkpoint_dir.h"
#include "test_args.h"
#include "xlaunch/accelerator.h"

namespace {

using xlaunch::test::get;

struct Synthetic : torch::data::datasets::Dataset<Synthetic> {
  torch::data::Example<> get(size_t index) override {
    const double i = static_cast<double>(index);
    std::vector<float> x(16);
    for (int k = 0; k < 16; ++k) x[k] = static_cast<float>(std::sin(0.37 * (i * 16 + k)));
    return {torch::tensor(x), torch::scalar_tensor(static_cast<int64_t>(index * 7 % 4), torch::kLong)};
  }
  std::optional<size_t> size() const override { return 4096; }
};

}  // namespace

int main(int argc, char** argv) {
  const xlaunch::test::Args args = xlaunch::test::parse_args(argc, argv);
  const std::string marker = get(args, "--marker"), save = get(args, "--save"), resume = get(args, "--resume");
  const int64_t save_every = std::stoll(get(args, "--save_every", "0"));
  const int64_t pause_in = std::stoll(get(args, "--pause_in_save", "0"));
  try {
    xlaunch::Accelerator acc;
    acc.set_seed(1234, false);
    torch::nn::Sequential net(torch::nn::Linear(16, 64), torch::nn::ReLU(), torch::nn::Linear(64, 4));
    auto model = acc.prepare(net);
    torch::optim::SGD inner(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
    auto& opt = acc.prepare(inner);
    xlaunch::LoaderOptions lo;
    lo.batch_size = 16;
    lo.seed = 7;
    auto& loader = acc.prepare(xlaunch::Loader(Synthetic(), lo));
    if (!resume.empty()) {
      acc.load_state(resume);
      acc.print("loaded ", resume, " at step ", acc.step());
      return 0;
    }
    int64_t saves = 0;
    if (pause_in > 0 && acc.is_main_process())
      xlaunch::checkpoint::set_save_hook([&](const std::string& event) {
        if (event != "wrote MANIFEST" || saves != pause_in) return;
        std::ofstream(marker + ".save") << "in save " << saves << "\n";
        std::this_thread::sleep_for(std::chrono::seconds(300));
      });
    for (int64_t steps = 0;;) {
      for (auto& batch : loader) {
        auto loss = torch::nn::functional::cross_entropy(model(batch.data), batch.target);
        acc.backward(loss);
        opt.step();
        opt.zero_grad();
        if (++steps == 20 && acc.is_main_process() && !marker.empty()) std::ofstream(marker) << "step 20\n";
        if (save_every > 0 && steps % save_every == 0) {
          ++saves;
          acc.save_state(save);
        }
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "partition_train: %s\n", e.what());
    return 1;
  }
}
