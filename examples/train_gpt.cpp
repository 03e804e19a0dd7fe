// A GPT-style byte-level language model, trained data-parallel or fully sharded:
//
//   xlaunch run -n 2 examples/train_gpt --steps 300
//   (with `ddp: {zero_stage: 3}` in the config, each block is a unit: docs/memory.md)
//
// The corpus is the text of Debian's `fortunes` package (/usr/share/games/fortunes: some 2.3 MB of
// quotations, jokes and verse, every file without a .dat or .u8 suffix, in name order), read as
// bytes: the last 10% are the validation text. The model: token and position embeddings, pre-norm
// blocks of causal self-attention and an MLP, a final norm, and the output projection tied to the
// token embedding. Each block is declared xlaunch::FullyShard<Block>, so at ddp.zero_stage 3 it is a
// unit gathered for its forward and its backward; the embeddings and the final norm are the root.
// AdamW (weight decay on matrices only), a cosine schedule with warmup, gradient clipping,
// bf16 autocast where the CPU computes bf16 natively (AVX512-BF16 or AMX) and the config sets no
// mixed precision, a named checkpoint at the end (and every --save_every steps), TensorBoard.
// It prints tokens/s, the training and validation loss, and the corpus' unigram entropy, which the
// validation loss must fall well below (a model that learned nothing of context stays at it).
// Options and results: docs/examples.md.
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "xlaunch/accelerator.h"
#include "gpt_model.h"
#include "xlaunch/lr_scheduler.h"

namespace {

using xlaunch::examples::Gpt;

struct Options {
  std::string corpus = "/usr/share/games/fortunes";
  int64_t steps = 300;
  int64_t batch_size = 16;  // sequences per rank
  int64_t seq = 128;
  int64_t dim = 192;
  int64_t layers = 4;
  int64_t heads = 6;
  double lr = 3e-3;
  double weight_decay = 0.1;
  double clip = 1.0;
  int64_t warmup = -1;  // -1: 30, or a tenth of --steps when that is fewer
  int64_t eval_every = 100;
  int64_t eval_batches = 16;
  int64_t log_every = 10;
  int64_t save_every = 0;  // 0: a checkpoint at the end only
  uint64_t seed = 42;
  std::string project_dir;  // "": the config's, else runs/gpt
  bool resume = false;
};

// ---- the corpus ---------------------------------------------------------------------------------

std::string read_corpus(const std::string& path) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (const auto& e : fs::directory_iterator(path, ec)) {
      const std::string ext = e.path().extension().string();
      if (e.is_regular_file() && !e.is_symlink() && ext != ".dat" && ext != ".u8") files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
  } else if (fs::is_regular_file(path, ec)) {
    files.push_back(path);
  }
  std::string text;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::ostringstream os;
    os << in.rdbuf();
    text += os.str();
  }
  if (text.size() < 100000)
    throw std::runtime_error("the corpus " + path + " has " + std::to_string(text.size()) + " bytes of text, fewer than "
                             "100000: install Debian's fortunes package (apt-get install fortunes), or pass --corpus "
                             "a text file or a directory of them");
  return text;
}

// Windows of seq + 1 bytes, back to back: input bytes [0, seq), targets [1, seq + 1).
class Windows : public torch::data::datasets::Dataset<Windows> {
 public:
  Windows(torch::Tensor bytes, int64_t seq) : bytes_(std::move(bytes)), seq_(seq) {}
  torch::data::Example<> get(size_t i) override {
    const torch::Tensor w = bytes_.narrow(0, static_cast<int64_t>(i) * seq_, seq_ + 1).to(torch::kLong);
    return {w.narrow(0, 0, seq_), w.narrow(0, 1, seq_)};
  }
  std::optional<size_t> size() const override { return static_cast<size_t>((bytes_.size(0) - 1) / seq_); }

 private:
  torch::Tensor bytes_;
  int64_t seq_;
};

// -sum p log p over the byte frequencies of `bytes`, in nats: a model's loss without any context.
double unigram_entropy(const torch::Tensor& bytes) {
  const torch::Tensor p = torch::bincount(bytes.to(torch::kLong), {}, 256).to(torch::kDouble) / bytes.size(0);
  const torch::Tensor nz = p.masked_select(p > 0);
  return -(nz * nz.log()).sum().item<double>();
}

// Whether this CPU computes bf16 natively (flags of /proc/cpuinfo).
bool cpu_has_bf16() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("flags", 0) == 0)
      return line.find(" avx512_bf16") != std::string::npos || line.find(" amx_bf16") != std::string::npos;
  return false;
}

xlaunch::Loader make_loader(torch::Tensor bytes, const Options& o, bool train) {
  auto lo = xlaunch::LoaderOptions::from_env();
  lo.batch_size = o.batch_size;
  lo.shuffle = train;
  lo.seed = o.seed;
  lo.drop_last = true;
  return xlaunch::Loader(Windows(std::move(bytes), o.seq), lo);
}

// Mean loss over the first eval_batches batches of the validation text, over every rank.
double evaluate(xlaunch::Accelerator& acc, Gpt& net, xlaunch::PreparedModel<Gpt>& model, xlaunch::Loader& val,
                int64_t batches) {
  torch::NoGradGuard no_grad;
  net->eval();
  auto sum = torch::zeros({}, torch::TensorOptions().device(acc.device()).dtype(torch::kDouble));
  int64_t n = 0;
  for (auto& batch : val) {
    if (n == batches) break;  // every rank stops at the same count (even batches)
    sum += torch::nn::functional::cross_entropy(model(batch.data).reshape({-1, 256}).to(torch::kFloat),
                                                batch.target.reshape({-1}))
               .to(torch::kDouble);
    ++n;
  }
  net->train();
  return acc.reduce(sum, xlaunch::ReduceOp::Avg).item<double>() / static_cast<double>(std::max<int64_t>(n, 1));
}

int train(Options o) {
  auto options = xlaunch::AcceleratorOptions::from_env();
  if (!o.project_dir.empty()) options.project_dir = o.project_dir;
  if (options.project_dir.empty()) options.project_dir = "runs/gpt";
  if (o.resume && options.resume.empty()) options.resume = "latest";
  if (options.log_with.empty()) options.log_with = {"tensorboard"};
  // The config's choice wins; on a CPU without native bf16, autocast to it would only be slower.
  const bool bf16_auto = options.mixed_precision == "no" && !torch::cuda::is_available() && cpu_has_bf16();
  if (bf16_auto) options.mixed_precision = "bf16";
  xlaunch::Accelerator acc(options);
  acc.set_seed(o.seed);

  const std::string text = read_corpus(o.corpus);
  const torch::Tensor all = torch::from_blob(const_cast<char*>(text.data()), {static_cast<int64_t>(text.size())},
                                             torch::kUInt8).clone();
  const int64_t split = all.size(0) * 9 / 10;
  const torch::Tensor train_bytes = all.narrow(0, 0, split), val_bytes = all.narrow(0, split, all.size(0) - split);
  const double entropy = unigram_entropy(train_bytes);

  Gpt net(o.dim, o.layers, o.heads, o.seq);
  int64_t n_params = 0;
  for (const auto& p : net->parameters()) n_params += p.numel();
  auto model = acc.prepare(net);
  // Weight decay on matrices, none on biases, norms and the position table's rows: by shape, which
  // a prepared model keeps at every stage.
  std::vector<torch::Tensor> decay, no_decay;
  for (const auto& p : net->named_parameters()) (p.value().dim() >= 2 && p.key() != "pos" ? decay : no_decay).push_back(p.value());
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(
                                 torch::optim::AdamWOptions(o.lr).betas({0.9, 0.95}).weight_decay(o.weight_decay)));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(
                                    torch::optim::AdamWOptions(o.lr).betas({0.9, 0.95}).weight_decay(0)));
  torch::optim::AdamW adamw(groups, torch::optim::AdamWOptions(o.lr));
  auto& opt = acc.prepare(adamw);
  auto& train_loader = acc.prepare(make_loader(train_bytes, o, true));
  auto& val_loader = acc.prepare(make_loader(val_bytes, o, false));
  xlaunch::ScheduleOptions schedule;
  schedule.total_steps = o.steps;
  schedule.warmup_steps = o.warmup >= 0 ? o.warmup : std::min<int64_t>(30, o.steps / 10);
  auto cosine = xlaunch::get_scheduler("cosine", adamw, schedule);
  auto& sched = acc.prepare(*cosine);
  acc.init_trackers("gpt", {{"lr", o.lr},
                            {"batch_size", o.batch_size},
                            {"seq", o.seq},
                            {"dim", o.dim},
                            {"layers", o.layers},
                            {"processes", acc.num_processes()},
                            {"zero_stage", acc.options().ddp.zero_stage},
                            {"mixed_precision", acc.options().mixed_precision}});
  if (acc.maybe_load_state()) acc.print("resumed at step ", acc.step());
  const int64_t world = acc.num_processes();
  char head[320];
  std::snprintf(head, sizeof head,
                "gpt: %.2fM parameters (%lld layers, dim %lld), %d process%s, zero_stage %d, mixed precision %s%s; corpus "
                "%s: %lld training bytes, unigram_entropy=%.4f nats",
                static_cast<double>(n_params) / 1e6, static_cast<long long>(o.layers), static_cast<long long>(o.dim),
                acc.num_processes(), world > 1 ? "es" : "", acc.options().ddp.zero_stage,
                acc.options().mixed_precision.c_str(), bf16_auto ? " (the CPU has bf16)" : "", o.corpus.c_str(),
                static_cast<long long>(split), entropy);
  acc.print(head);

  auto window_sum = torch::zeros({}, torch::TensorOptions().device(acc.device()));
  int64_t window = 0;
  auto t0 = std::chrono::steady_clock::now();
  int64_t tokens_since = 0;
  double val_loss = std::nan("");
  while (acc.step() < o.steps) {
    for (auto& batch : train_loader) {
      if (acc.step() >= o.steps) break;
      acc.accumulate();
      const torch::Tensor logits = model(batch.data);
      const torch::Tensor loss = torch::nn::functional::cross_entropy(logits.reshape({-1, 256}).to(torch::kFloat),
                                                                      batch.target.reshape({-1}));
      acc.backward(loss);
      if (acc.sync_gradients()) acc.clip_grad_norm_(o.clip);
      opt.step();
      sched.step();
      opt.zero_grad();
      window_sum += loss.detach();
      ++window;
      tokens_since += batch.data.numel() * world;
      if (!acc.sync_gradients()) continue;
      const int64_t step = acc.step();
      if (step % o.log_every == 0 || step == o.steps) {
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const double train_loss = acc.reduce(window_sum, xlaunch::ReduceOp::Avg).item<double>() / window;
        const double tokens_per_s = static_cast<double>(tokens_since) / seconds;
        char line[200];
        std::snprintf(line, sizeof line, "step=%lld train_loss=%.4f lr=%.2e tokens_per_s=%.0f",
                      static_cast<long long>(step), train_loss, sched.last_lr().at(0), tokens_per_s);
        acc.print(line);
        acc.log({{"train/loss", train_loss}, {"lr", sched.last_lr().at(0)}, {"tokens_per_s", tokens_per_s}}, step);
        window_sum.zero_();
        window = 0;
        tokens_since = 0;
        t0 = std::chrono::steady_clock::now();
      }
      if (step % o.eval_every == 0 || step == o.steps) {
        val_loss = evaluate(acc, net, model, val_loader, o.eval_batches);
        char line[120];
        std::snprintf(line, sizeof line, "step=%lld val_loss=%.4f unigram_entropy=%.4f", static_cast<long long>(step),
                      val_loss, entropy);
        acc.print(line);
        acc.log({{"val/loss", val_loss}}, step);
        t0 = std::chrono::steady_clock::now();  // the evaluation is not training time
        tokens_since = 0;
      }
      if (o.save_every > 0 && step % o.save_every == 0 && step < o.steps) acc.save_state();
    }
  }
  acc.save_state();
  const std::string weights = acc.options().project_dir + "/model";
  acc.save_model(model, weights);
  char line[160];
  std::snprintf(line, sizeof line, "final val_loss=%.4f unigram_entropy=%.4f ratio=%.3f", val_loss, entropy,
                val_loss / entropy);
  acc.print(line);
  acc.print("weights saved as safetensors in ", weights);
  acc.end_training();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Train a GPT-style byte-level language model on Debian's fortunes (run it with `xlaunch run`)"};
  app.add_option("--corpus", o.corpus, "A text file, or a directory of them (Debian package fortunes)")->capture_default_str();
  app.add_option("--steps", o.steps, "Optimizer steps in all (counting those of a resumed run)")->capture_default_str();
  app.add_option("--batch_size", o.batch_size, "Sequences per process and step")->capture_default_str();
  app.add_option("--seq", o.seq, "Bytes per sequence (the context)")->capture_default_str();
  app.add_option("--dim", o.dim, "Width of the model")->capture_default_str();
  app.add_option("--layers", o.layers, "Blocks (each a unit at ddp.zero_stage 3)")->capture_default_str();
  app.add_option("--heads", o.heads, "Attention heads (dividing --dim)")->capture_default_str();
  app.add_option("--lr", o.lr, "AdamW's peak learning rate (warmup, then cosine decay to 0)")->capture_default_str();
  app.add_option("--weight_decay", o.weight_decay, "AdamW's weight decay on matrices")->capture_default_str();
  app.add_option("--clip", o.clip, "Gradient clipping: the global norm's maximum")->capture_default_str();
  app.add_option("--warmup", o.warmup, "Warmup steps (default: 30, or a tenth of --steps when that is fewer)");
  app.add_option("--eval_every", o.eval_every, "Steps between validation losses")->capture_default_str();
  app.add_option("--eval_batches", o.eval_batches, "Validation batches per evaluation")->capture_default_str();
  app.add_option("--log_every", o.log_every, "Steps between training lines")->capture_default_str();
  app.add_option("--save_every", o.save_every, "Steps between named checkpoints (0: at the end only)")->capture_default_str();
  app.add_option("--seed", o.seed, "Seed of the weights and of the shuffling")->capture_default_str();
  app.add_option("--project_dir", o.project_dir, "Checkpoints and weights (default: the config's, else runs/gpt)");
  app.add_flag("--resume", o.resume, "Continue from the newest checkpoint when there is one");
  CLI11_PARSE(app, argc, argv);
  if (o.dim % o.heads != 0) {
    std::fprintf(stderr, "train_gpt: --dim %lld does not divide into --heads %lld\n", static_cast<long long>(o.dim),
                 static_cast<long long>(o.heads));
    return 2;
  }
  try {
    return train(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_gpt: error: %s\n", e.what());
    return 1;
  }
}
