// Fashion-MNIST with a small CNN, data-parallel through the Accelerator API only:
//
//   xlaunch run -n 2 examples/train_fashion_mnist --epochs 3
//
// Every rank builds the same model, optimizer, schedule and loaders; acc.prepare makes them
// data-parallel (rank 0's weights everywhere, gradients averaged in backward, each rank reading its
// shard, the learning rate following a cosine schedule with warmup by optimizer steps). Mixed
// precision comes from the config (XLAUNCH_MIXED_PRECISION), with no code here. An EMA of the
// weights is kept and registered for checkpointing. A named checkpoint
// (<project_dir>/checkpoints/checkpoint_<step>) is saved at the end of every epoch (and within it,
// with --checkpoints_per_epoch), the config's checkpoint.total_limit keeping the newest; --resume
// (or `xlaunch run --resume`, or a restart) continues from the newest. After each epoch: exact
// test accuracy over all 10000 test images (gather_for_metrics drops the padding that evened out
// the shards) and one summary line; at the end, the EMA's accuracy and the weights as safetensors
// (<project_dir>/model). Only the main process prints. With log_with (tensorboard unless the config
// says otherwise), the training loss and learning rate every --log_every optimizer steps and the
// test accuracy after each epoch go to <project_dir>/fashion_mnist, beside the utilization the
// runtime logs there by itself: `tensorboard --logdir runs/fashion_mnist`. Options and results:
// docs/examples.md.
#include <torch/torch.h>

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "fashion_cnn.h"
#include "progress.h"
#include "xlaunch/accelerator.h"
#include "xlaunch/fashion_mnist.h"
#include "xlaunch/lr_scheduler.h"

namespace {

using xlaunch::FashionMnist;

struct Options {
  int epochs = 3;  // about 90% test accuracy (docs/examples.md)
  int64_t batch_size = 64;  // per rank: the global batch is batch_size * processes
  int64_t global_batch_size = 0;  // > 0: batch_size = this / processes, whatever their number
  double lr = 2e-3;
  uint64_t seed = 42;
  std::string data_dir = FashionMnist::kDefaultRoot;
  std::string project_dir;  // "": the config's project_dir, else runs/fashion_mnist
  bool resume = false;
  double ema_decay = 0.999;
  int64_t limit_train = 0;  // 0: all 60000 training images
  int fail_at_epoch = 0;    // > 0: rank fail_rank exits with code 3 at the start of this epoch, first attempt only
  int fail_rank = 1;
  int checkpoints_per_epoch = 1;  // > 1: also save_state every num_batches / K batches within an epoch
  int64_t log_every = 10;   // optimizer steps between logged training losses
};

// The first n samples of a dataset (--limit_train: short runs for tests).
class Head : public torch::data::datasets::Dataset<Head> {
 public:
  Head(FashionMnist base, size_t n) : base_(std::move(base)), n_(std::min(n, *base_.size())) {}
  torch::data::Example<> get(size_t i) override { return base_.get(i); }
  std::optional<size_t> size() const override { return n_; }

 private:
  FashionMnist base_;
  size_t n_;
};

xlaunch::Loader make_loader(FashionMnist::Split split, const Options& o, bool train) {
  auto lo = xlaunch::LoaderOptions::from_env();
  lo.batch_size = train ? o.batch_size : 256;
  lo.shuffle = train;
  lo.seed = o.seed;
  FashionMnist ds(split, o.data_dir);
  if (train && o.limit_train > 0) return xlaunch::Loader(Head(std::move(ds), static_cast<size_t>(o.limit_train)), lo);
  return xlaunch::Loader(std::move(ds), lo);
}

// An exponential moving average of the weights (and a copy of the buffers), updated after every
// optimizer step: often a little better than the weights themselves. Registered for
// checkpointing, so a resumed run continues it exactly.
struct Ema {
  Ema(const torch::nn::Module& m, double decay) : decay(decay) {
    for (const auto& p : m.named_parameters()) shadow.emplace(p.key(), p.value().detach().clone());
  }
  void update(const torch::nn::Module& m) {
    torch::NoGradGuard no_grad;
    for (const auto& p : m.named_parameters()) shadow.at(p.key()).lerp_(p.value().detach(), 1 - decay);
  }
  // Exchanges the shadow weights with the model's (evaluate the EMA, then swap back).
  void swap(torch::nn::Module& m) {
    torch::NoGradGuard no_grad;
    for (auto& p : m.named_parameters()) {
      auto kept = p.value().detach().clone();
      p.value().detach().copy_(shadow.at(p.key()));
      shadow.at(p.key()).copy_(kept);
    }
  }
  void save(torch::serialize::OutputArchive& a) const {
    for (const auto& [k, t] : shadow) a.write(k, t);
  }
  void load(torch::serialize::InputArchive& a) {
    for (auto& [k, t] : shadow) a.read(k, t);
  }
  double decay;
  std::map<std::string, torch::Tensor> shadow;
};

// Test accuracy over the whole test set, every sample counted once whatever the world size.
double evaluate(xlaunch::Accelerator& acc, FashionCnn& net, xlaunch::PreparedModel<FashionCnn>& model,
                xlaunch::Loader& test) {
  torch::NoGradGuard no_grad;
  net->eval();
  int64_t correct = 0, seen = 0;
  for (auto& batch : test) {
    const auto hits = model(batch.data).argmax(1).eq(batch.target);
    const auto all = acc.gather_for_metrics(hits);
    correct += all.sum().item<int64_t>();
    seen += all.size(0);
  }
  net->train();
  return static_cast<double>(correct) / static_cast<double>(std::max<int64_t>(seen, 1));
}

int train(Options o) {
  auto options = xlaunch::AcceleratorOptions::from_env();
  if (!o.project_dir.empty()) options.project_dir = o.project_dir;
  if (options.project_dir.empty()) options.project_dir = "runs/fashion_mnist";
  options.checkpoint_every_epoch = true;
  if (o.resume && options.resume.empty()) options.resume = "latest";
  if (options.log_with.empty()) options.log_with = {"tensorboard"};
  xlaunch::Accelerator acc(options);
  if (o.global_batch_size > 0) {  // the same global batch on any number of processes (an elastic job)
    if (o.global_batch_size % acc.num_processes() != 0) {
      if (acc.is_main_process())
        std::fprintf(stderr, "train_fashion_mnist: --global_batch_size %lld is not a multiple of the %d processes\n",
                     static_cast<long long>(o.global_batch_size), acc.num_processes());
      return 2;
    }
    o.batch_size = o.global_batch_size / acc.num_processes();
  }
  acc.set_seed(o.seed);
  FashionCnn net;  // shares the module with the prepared model: net->eval(), net->train()
  auto model = acc.prepare(net);
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(o.lr));
  auto& opt = acc.prepare(adam);
  auto& train_loader = acc.prepare(make_loader(FashionMnist::Split::Train, o, true));
  auto& test_loader = acc.prepare(make_loader(FashionMnist::Split::Test, o, false));
  // The schedule counts optimizer steps: ceil(batches / gradient_accumulation_steps) per epoch,
  // since the last window of an epoch steps too (sync_with_dataloader).
  xlaunch::ScheduleOptions schedule;
  const int64_t k = acc.options().gradient_accumulation_steps;
  schedule.total_steps = o.epochs * ((train_loader.num_batches() + k - 1) / k);
  schedule.warmup_steps = schedule.total_steps / 20;
  auto cosine = xlaunch::get_scheduler("cosine", adam, schedule);
  auto& sched = acc.prepare(*cosine);
  Ema ema(*net, o.ema_decay);
  acc.register_for_checkpointing(ema);

  acc.init_trackers("fashion_mnist", {{"lr", o.lr},
                                       {"batch_size", o.batch_size},
                                       {"processes", acc.num_processes()},
                                       {"epochs", o.epochs},
                                       {"ema_decay", o.ema_decay},
                                       {"seed", static_cast<double>(o.seed)},
                                       {"mixed_precision", acc.options().mixed_precision},
                                       {"gradient_accumulation_steps", acc.options().gradient_accumulation_steps}});
  int start_epoch = 0;
  if (acc.maybe_load_state()) {
    start_epoch = static_cast<int>(train_loader.epoch());  // restored with the sampler's state
    acc.print("resumed at epoch ", start_epoch + 1, " (step ", acc.step(), ")");
  }
  const int64_t world = acc.num_processes();
  const int64_t epoch_samples = train_loader.dataset_size();
  acc.print("training on ", world, " process", world > 1 ? "es" : "", " (", acc.device(), ", mixed precision ",
            acc.options().mixed_precision, "), global batch ", o.batch_size * world, ", ", epoch_samples,
            " training samples");

  const char* restarts = std::getenv("XLAUNCH_RESTART_COUNT");
  const bool first_attempt = !restarts || std::string(restarts) == "0";
  for (int epoch = start_epoch; epoch < o.epochs; ++epoch) {
    if (epoch + 1 == o.fail_at_epoch && first_attempt && acc.process_index() == o.fail_rank) {
      std::fprintf(stderr, "train_fashion_mnist: rank %d fails on purpose at the start of epoch %d (--fail_at_epoch)\n",
                   o.fail_rank, o.fail_at_epoch);
      std::exit(3);
    }
    const auto t0 = std::chrono::steady_clock::now();
    char label[32];
    std::snprintf(label, sizeof label, "epoch %d/%d", epoch + 1, o.epochs);
    xlaunch::examples::ProgressBar bar(label, epoch_samples, acc.is_main_process());
    // The loss summed on the device: read only when the bar draws, so steps do not wait for it.
    auto loss_sum = torch::zeros({}, torch::TensorOptions().device(acc.device()));
    // The same since the last logged loss; read (a host sync) every log_every optimizer steps only.
    auto window_sum = torch::zeros({}, torch::TensorOptions().device(acc.device()));
    int64_t window = 0;
    int64_t steps = 0, done = 0;
    // Batches between checkpoints within the epoch (the epoch's end always saves).
    const int64_t nb = train_loader.num_batches();
    const int64_t save_every = (nb + o.checkpoints_per_epoch - 1) / o.checkpoints_per_epoch;
    // The batch of the epoch about to come: not 0 after a resume in the middle of an epoch.
    int64_t batch_index = train_loader.position().batch;
    for (auto& batch : train_loader) {
      acc.accumulate();
      auto loss = torch::nn::functional::cross_entropy(model(batch.data), batch.target);
      acc.backward(loss);
      opt.step();
      sched.step();
      opt.zero_grad();
      if (acc.sync_gradients() && !acc.optimizer_step_was_skipped()) ema.update(*net);
      loss_sum += loss.detach().to(torch::kFloat);
      window_sum += loss.detach().to(torch::kFloat);
      ++window;
      ++steps;
      if (acc.sync_gradients() && !acc.optimizer_step_was_skipped() && acc.step() % o.log_every == 0) {
        acc.log({{"train/loss", window_sum.item<double>() / static_cast<double>(window)}, {"lr", sched.last_lr().at(0)}},
                acc.step(), xlaunch::LogReduce::Mean);
        window_sum.zero_();
        window = 0;
      }
      done = std::min(epoch_samples, done + batch.size() * world);
      bar.update(done, [&] { return loss_sum.item<double>() / static_cast<double>(steps); });
      ++batch_index;  // batches of this epoch done
      if (o.checkpoints_per_epoch > 1 && batch_index % save_every == 0 && batch_index < nb) acc.save_state();
    }
    const double train_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double train_loss = acc.reduce(loss_sum, xlaunch::ReduceOp::Avg).item<double>() / static_cast<double>(steps);
    bar.finish(done, train_loss);
    const double accuracy = evaluate(acc, net, model, test_loader);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    char line[160];
    std::snprintf(line, sizeof line, "epoch=%d train_loss=%.4f test_acc=%.4f samples_per_s=%.1f seconds=%.1f",
                  epoch + 1, train_loss, accuracy, static_cast<double>(epoch_samples) / train_seconds, seconds);
    acc.print(line);
    // A CSV file's columns are those of its first record (docs/tracking.md): with csv among the
    // trackers, the epoch's figures stay in the line above.
    const auto& trackers = acc.options().log_with;
    if (std::find(trackers.begin(), trackers.end(), "csv") == trackers.end())
      acc.log({{"test/accuracy", accuracy}, {"train/epoch_loss", train_loss}});
  }
  ema.swap(*net);
  const double ema_accuracy = evaluate(acc, net, model, test_loader);
  ema.swap(*net);
  char line[64];
  std::snprintf(line, sizeof line, "ema_test_acc=%.4f", ema_accuracy);
  acc.print(line);
  const std::string weights = acc.options().project_dir + "/model";
  acc.save_model(model, weights);
  acc.print("weights saved as safetensors in ", weights);
  acc.end_training();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Train a small CNN on Fashion-MNIST, data-parallel (run it with `xlaunch run`)"};
  app.add_option("--epochs", o.epochs, "Epochs to train (in all, counting those of a resumed run)")->capture_default_str();
  app.add_option("--batch_size", o.batch_size, "Batch size per process; the global batch is this times the "
                                               "number of processes")->capture_default_str();
  app.add_option("--global_batch_size", o.global_batch_size,
                 "The global batch instead: each process takes this / processes (a multiple of them), so a "
                 "resume on another number of processes keeps the batch and its place in the epoch");
  app.add_option("--lr", o.lr, "Adam's peak learning rate (linear warmup over 5% of the steps, then cosine decay to 0)")
      ->capture_default_str();
  app.add_option("--ema_decay", o.ema_decay, "Decay of the weights' moving average")->capture_default_str();
  app.add_option("--seed", o.seed, "Seed of the weights and of the shuffling")->capture_default_str();
  app.add_option("--data_dir", o.data_dir, "Fashion-MNIST directory (Debian package dataset-fashion-mnist)")
      ->capture_default_str();
  app.add_option("--project_dir", o.project_dir,
                 "Checkpoints go to <this>/checkpoints/checkpoint_<step> (one per epoch), the weights to <this>/model "
                 "(default: the config's project_dir, else runs/fashion_mnist)");
  app.add_flag("--resume", o.resume,
               "Continue from the newest checkpoint when there is one (as `xlaunch run --resume` does); else start "
               "afresh, so one command line serves a first run and every restart");
  app.add_option("--checkpoints_per_epoch", o.checkpoints_per_epoch,
                 "Checkpoints per epoch: K > 1 also saves every 1/K of an epoch (a restart loses less)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app.add_option("--limit_train", o.limit_train, "Train on the first N images only (0: all 60000)")->capture_default_str();
  app.add_option("--fail_at_epoch", o.fail_at_epoch, "Try restarts: rank --fail_rank exits with code 3 at the start "
                                                     "of this epoch, on the first attempt only (0: never)");
  app.add_option("--fail_rank", o.fail_rank, "The rank that --fail_at_epoch stops")->capture_default_str();
  app.add_option("--log_every", o.log_every, "Optimizer steps between logged training losses (log_with)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    return train(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_fashion_mnist: error: %s\n", e.what());
    return 1;
  }
}
