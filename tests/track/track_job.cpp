// A training job that logs, for tracking_job_test.sh: a small model trained on a synthetic
// dataset, with init_trackers and, after every optimizer step, acc.log of this rank's loss
// reduced over the ranks. Each rank also writes its own values to FILE.rank<r> ("step loss
// maxloss"), so that the test can compute what the reduced values must be, as one process would.
//
//   track_job --epochs E --values FILE [--calls one|mixed] [--crash_at_step S]
//   --calls one (default): one acc.log per step, {train/loss, lr} averaged over the ranks (a CSV
//   run's columns); mixed: three calls per step, train/loss (mean), train/max_loss (the largest
//   per-sample loss, max over the ranks) and lr (not reduced).
//   --crash_at_step S: on the first attempt of the job (XLAUNCH_RESTART_COUNT 0), rank 1 (or 0 in
//   a world of one) exits with status 3 right after step S's log, once rank 0 has written what it
//   logged (end_training): a crash after a checkpoint, so that the restarted job resumes and logs
//   the steps after the checkpoint again.
// Settings (log_with, project_dir, report_interval, checkpoint.*) come from the XLAUNCH_* environment.
#include <torch/torch.h>

#include <unistd.h>

#include <cmath>
#include <fstream>
#include <iomanip>
#include <string>

#include "synthetic_dataset.h"
#include "test_args.h"
#include "xlaunch/accelerator.h"

using xlaunch::test::get;

int main(int argc, char** argv) {
  const auto args = xlaunch::test::parse_args(argc, argv);
  const int epochs = std::stoi(get(args, "--epochs", "2"));
  const int64_t crash_at = std::stoll(get(args, "--crash_at_step", "-1"));
  const bool mixed = get(args, "--calls", "one") == "mixed";
  torch::manual_seed(0);
  xlaunch::Accelerator acc;
  auto model = acc.prepare(torch::nn::Sequential(torch::nn::Linear(8, 16), torch::nn::Tanh(), torch::nn::Linear(16, 4)));
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  auto& opt = acc.prepare(sgd);
  xlaunch::LoaderOptions lo;
  lo.batch_size = 8;
  lo.num_workers = 0;
  auto& loader = acc.prepare(xlaunch::Loader(xlaunch::test::Synthetic(128), lo));
  acc.init_trackers("track_job", {{"lr", 0.1}, {"batch_size", 8}, {"optimizer", "sgd"}, {"momentum", true}});
  acc.maybe_load_state();
  std::ofstream values(get(args, "--values") + ".rank" + std::to_string(acc.process_index()), std::ios::app);
  values << std::setprecision(17);
  for (int64_t epoch = loader.epoch(); epoch < epochs; ++epoch) {  // a resumed job continues its epoch
    for (auto& batch : loader) {
      const auto per_sample = torch::nn::functional::cross_entropy(
          model(batch.data), batch.target, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
      const auto loss = per_sample.mean();
      acc.backward(loss);
      opt.step();
      opt.zero_grad();
      const double l = loss.item<double>(), m = per_sample.max().item<double>();
      if (mixed) {
        acc.log({{"train/loss", l}}, -1, xlaunch::LogReduce::Mean);
        acc.log({{"train/max_loss", m}}, -1, xlaunch::LogReduce::Max);
        acc.log({{"lr", 0.1}});
      } else {
        acc.log({{"train/loss", l}, {"lr", 0.1}}, -1, xlaunch::LogReduce::Mean);
      }
      values << acc.step() << " " << l << " " << m << "\n" << std::flush;
      if (acc.step() == crash_at && xlaunch::env::get_int(xlaunch::env::kRestartCount) == 0) {
        // What rank 0 logged so far is on disk before the crash: the orphans the resumed job must drop.
        acc.end_training();
        acc.wait_for_everyone();
        if (acc.process_index() == (acc.num_processes() > 1 ? 1 : 0)) _exit(3);
      }
    }
  }
  acc.end_training();
  return 0;
}
