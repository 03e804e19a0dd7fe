// A whole training job through the Accelerator, for training_job_test.sh: a prepared cosine
// schedule with warmup, an EMA of the weights registered for checkpointing, named checkpoints
// (project_dir), forced fp16 skips, and stops of every kind, so that a run that stopped and
// resumed can be compared with one that ran straight through.
//
//   train_job --project DIR --epochs E --out FILE       rank 0 writes the final parameters and the
//                                                       EMA's bytes to FILE
//   ... --lr_log FILE        rank 0 appends "micro lr step" after every micro-step's sched.step()
//   ... --skip LIST          sync steps (0-based, comma list) at which rank 0's gradients get an
//                            inf after backward: the GradScaler (fp16) must skip them on every rank
//   ... --stop_at_step S     save_state() at optimizer step S, then exit 0 (an interrupted run)
//   ... --kill_at_save K     SIGKILL rank 0 while writing its K-th named checkpoint (1-based)
//   ... --wait_at_step S --marker FILE   at step S, write FILE and wait (at most 120 s) until this
//                            rank is asked to stop for a preemption
//   ... --register_extra 1   register one more object (a count the checkpoint does not have)
// Settings (mixed precision, accumulation, checkpoint.*) come from the XLAUNCH_* environment.
#include <torch/torch.h>

#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "state/checkpoint_dir.h"
#include "synthetic_dataset.h"
#include "test_args.h"
#include "xlaunch/accelerator.h"
#include "xlaunch/lr_scheduler.h"

namespace {

using xlaunch::test::get;

// An exponential moving average of a model's parameters: the user state a real job keeps.
struct Ema {
  explicit Ema(const torch::nn::Module& m) {
    for (const auto& p : m.named_parameters()) shadow.emplace(p.key(), p.value().detach().clone());
  }
  void update(const torch::nn::Module& m, double decay) {
    torch::NoGradGuard no_grad;
    for (const auto& p : m.named_parameters()) shadow.at(p.key()).mul_(decay).add_(p.value().detach(), 1 - decay);
    ++updates;
  }
  void save(torch::serialize::OutputArchive& a) const {
    for (const auto& [k, t] : shadow) a.write(k, t);
    a.write("updates", torch::tensor(updates));
  }
  void load(torch::serialize::InputArchive& a) {
    for (auto& [k, t] : shadow) a.read(k, t);
    torch::Tensor u;
    a.read("updates", u);
    updates = u.item<int64_t>();
  }
  std::map<std::string, torch::Tensor> shadow;
  int64_t updates = 0;
};

struct Counter {
  void save(torch::serialize::OutputArchive& a) const { a.write("n", torch::tensor(n)); }
  void load(torch::serialize::InputArchive& a) {
    torch::Tensor t;
    a.read("n", t);
    n = t.item<int64_t>();
  }
  int64_t n = 0;
};

std::set<int64_t> parse_list(const std::string& s) {
  std::set<int64_t> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.insert(std::stoll(item));
  return out;
}

void write_bytes(std::ofstream& out, const std::string& name, const torch::Tensor& t) {
  const torch::Tensor c = t.detach().to(torch::kCPU).contiguous();  // the GPU's bytes are not the host's
  out << name << "\n";
  out.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.nbytes()));
}

int run(const std::map<std::string, std::string>& args) {
  auto options = xlaunch::AcceleratorOptions::from_env();
  if (!get(args, "--project").empty()) options.project_dir = get(args, "--project");
  options.scaler.init_scale = 128;  // no overflow of its own: the only skips are the forced ones
  xlaunch::Accelerator acc(options);
  acc.set_seed(7);
  auto net = torch::nn::Sequential(torch::nn::Linear(8, 16), torch::nn::ReLU(), torch::nn::Linear(16, 4));
  auto model = acc.prepare(net);
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.2).momentum(0.9));
  auto& opt = acc.prepare(sgd);
  auto lo = xlaunch::LoaderOptions::from_env();
  lo.batch_size = 4;
  lo.seed = 3;
  auto& loader = acc.prepare(xlaunch::Loader(xlaunch::test::Synthetic(96), lo));
  const int64_t epochs = std::stoll(get(args, "--epochs", "3"));
  const int64_t accum = acc.options().gradient_accumulation_steps;
  xlaunch::ScheduleOptions so;
  so.total_steps = epochs * ((loader.num_batches() + accum - 1) / accum);
  so.warmup_steps = so.total_steps / 5;
  auto schedule = xlaunch::get_scheduler("cosine", sgd, so);
  auto& sched = acc.prepare(*schedule);
  Ema ema(*net);
  acc.register_for_checkpointing(ema);
  Counter extra;
  if (get(args, "--register_extra") == "1") acc.register_for_checkpointing(extra);

  const int64_t kill_at = std::stoll(get(args, "--kill_at_save", "0"));
  if (kill_at > 0 && acc.is_main_process()) {
    auto saves = std::make_shared<int64_t>(0);
    xlaunch::checkpoint::set_save_hook([saves, kill_at](const std::string& event) {
      if (event == "wrote MANIFEST") ++*saves;
      if (*saves == kill_at - 1 && event == "wrote rank0/model_0.pt") raise(SIGKILL);
    });
  }
  if (acc.maybe_load_state()) acc.print("resumed at step ", acc.step());

  const std::set<int64_t> skips = parse_list(get(args, "--skip"));
  const int64_t stop_at = std::stoll(get(args, "--stop_at_step", "-1"));
  const int64_t wait_at = std::stoll(get(args, "--wait_at_step", "-1"));
  std::ofstream lr_log;
  if (acc.is_main_process() && !get(args, "--lr_log").empty()) lr_log.open(get(args, "--lr_log"), std::ios::app);
  lr_log.precision(17);
  for (int64_t epoch = loader.epoch(); epoch < epochs; ++epoch) {
    int64_t micro = epoch * loader.num_batches() + loader.position().batch;  // this micro-step's index in the run
    for (auto& batch : loader) {
      acc.accumulate();
      auto loss = torch::nn::functional::cross_entropy(model(batch.data), batch.target);
      acc.backward(loss);
      const bool sync = acc.sync_gradients();
      if (sync && acc.is_main_process() && skips.count((micro + 1) / accum - 1)) {
        torch::NoGradGuard no_grad;
        net->parameters()[0].mutable_grad()[0][0] = std::numeric_limits<float>::infinity();
      }
      opt.step();
      sched.step();
      opt.zero_grad();
      if (sync && !acc.optimizer_step_was_skipped()) ema.update(*net, 0.9);
      if (lr_log.is_open()) lr_log << micro << " " << sched.last_lr().at(0) << " " << acc.step() << std::endl;
      ++micro;
      if (sync && acc.step() == stop_at) {
        acc.save_state();
        return 0;
      }
      if (sync && acc.step() == wait_at) {
        if (acc.is_main_process()) std::ofstream(get(args, "--marker")) << "step " << wait_at << "\n";
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
        while (!acc.preemption_requested()) {
          if (std::chrono::steady_clock::now() > deadline) {
            std::cerr << "train_job: no preemption within 120 s of step " << wait_at << "\n";
            return 3;
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
      }
    }
  }
  if (acc.is_main_process() && !get(args, "--out").empty()) {
    std::ofstream out(get(args, "--out"), std::ios::binary);
    for (const auto& p : net->named_parameters()) write_bytes(out, p.key(), p.value());
    for (const auto& [k, t] : ema.shadow) write_bytes(out, "ema." + k, t);
    out << "ema.updates " << ema.updates << " step " << acc.step() << "\n";
  }
  acc.print("done at step ", acc.step());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(xlaunch::test::parse_args(argc, argv));
  } catch (const std::exception& e) {
    std::cerr << "train_job: error: " << e.what() << std::endl;
    return 1;
  }
}
