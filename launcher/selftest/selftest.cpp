// xlaunch_selftest: the program `xlaunch test` launches with the user's config, like
// `accelerate test`. Every rank runs each check with inputs built from (rank, index), so it knows
// the expected answer without asking anyone; rank 0 then gathers every rank's verdicts and prints
// one line per check and a final line. Exit code 0 (on every rank) only when all passed.
//
//   --fault CHECK@RANK  rank RANK corrupts its own result of CHECK (a slug from kChecks): shows
//                       that a failing check is reported, with its rank (tests/e2e).
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <sstream>

#include "xlaunch/accelerator.h"
#include "xlaunch/autocast.h"
#include "xlaunch/env_vars.h"
#include "xlaunch/grad_scaler.h"
#include "xlaunch/process_state.h"
#include "xlaunch/sampler.h"

namespace {

using at::Tensor;
using xlaunch::Accelerator;

// A check returns "" when it passed, else what it saw and what it expected. `faulty`: corrupt the
// result before comparing (--fault).
using CheckFn = std::function<std::string(Accelerator& acc, bool faulty)>;

// The first values of a tensor, "[1, 2, 3, ...]".
std::string values(const Tensor& t) {
  const Tensor v = t.detach().to(at::kDouble).flatten().cpu();
  std::string s = "[";
  for (int64_t i = 0; i < std::min<int64_t>(v.numel(), 6); ++i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%g", i ? ", " : "", v[i].item<double>());
    s += buf;
  }
  return s + (v.numel() > 6 ? ", ...]" : "]");
}

std::string mismatch(const Tensor& got, const Tensor& want) { return "got " + values(got) + " expected " + values(want); }

std::string expect_equal(const Tensor& got, const Tensor& want, const char* what) {
  if (got.sizes() == want.sizes() && got.cpu().to(at::kDouble).equal(want.cpu().to(at::kDouble))) return "";
  return std::string(what) + ": " + mismatch(got, want);
}

at::TensorOptions on(const Accelerator& acc, at::ScalarType t = at::kFloat) {
  return at::TensorOptions().device(acc.device()).dtype(t);
}

std::string check_place(Accelerator& acc, bool faulty) {
  const auto& place = xlaunch::ProcessState::get().place();
  const int w = acc.num_processes();
  const int64_t reported = acc.process_index() + (faulty ? 1 : 0);
  // CPU: this is the communicator that launched the job, whatever the training device.
  const Tensor all = acc.gather(torch::tensor({reported, int64_t{w}, int64_t{place.world_size}}));
  for (int r = 0; r < w; ++r) {
    const auto row = all.slice(0, 3 * r, 3 * r + 3);
    if (row[0].item<int64_t>() != r || row[1].item<int64_t>() != w || row[2].item<int64_t>() != w)
      return "process " + std::to_string(r) + " says it is rank " + std::to_string(row[0].item<int64_t>()) + " of " +
             std::to_string(row[1].item<int64_t>()) + " (launcher: world of " + std::to_string(row[2].item<int64_t>()) +
             "), expected rank " + std::to_string(r) + " of " + std::to_string(w);
  }
  return "";
}

// Every check issues all its collectives before judging: a rank that returned early would leave
// the others waiting in a collective it never joins.
std::string check_allreduce(Accelerator& acc, bool faulty) {
  const double w = acc.num_processes(), r = acc.process_index();
  const Tensor mine = torch::full({1000}, r + 1, on(acc));
  Tensor sum = acc.reduce(mine, xlaunch::ReduceOp::Sum);
  const Tensor mean = acc.reduce(mine, xlaunch::ReduceOp::Avg);
  const Tensor max = acc.reduce(mine, xlaunch::ReduceOp::Max);
  if (faulty) sum.add_(1);
  std::string bad = expect_equal(sum, torch::full({1000}, w * (w + 1) / 2, on(acc)), "sum of rank+1");
  if (bad.empty()) bad = expect_equal(mean, torch::full({1000}, (w + 1) / 2, on(acc)), "mean of rank+1");
  if (bad.empty()) bad = expect_equal(max, torch::full({1000}, w, on(acc)), "max of rank+1");
  return bad;
}

std::string check_gather(Accelerator& acc, bool faulty) {
  const int64_t w = acc.num_processes();
  Tensor all = acc.gather(torch::arange(3, on(acc)) + 100 * acc.process_index());
  if (faulty) all[0].fill_(-1);
  const Tensor want = (torch::arange(w, on(acc)).unsqueeze(1) * 100 + torch::arange(3, on(acc))).flatten();
  return expect_equal(all, want, "every rank's [100*rank + i], in rank order");
}

std::string check_broadcast(Accelerator& acc, bool faulty) {
  std::string bad;
  for (const int root : {0, acc.num_processes() - 1}) {
    Tensor t = torch::full({5}, acc.process_index() == root ? 7.0 + root : -1.0, on(acc));
    acc.broadcast(t, root);
    if (faulty) t.add_(1);
    if (bad.empty()) bad = expect_equal(t, torch::full({5}, 7.0 + root, on(acc)), ("from rank " + std::to_string(root)).c_str());
  }
  return bad;
}

// Every rank's shard is the one this rank derives for it, and the shards cover the dataset
// exactly once, plus fewer than world padded repeats.
std::string check_sampler(Accelerator& acc, bool faulty) {
  const int w = acc.num_processes();
  xlaunch::SamplerOptions so;
  so.dataset_size = 10 * w + 3;
  so.world_size = w;
  so.seed = 7;
  so.rank = acc.process_index();
  xlaunch::DistributedSampler mine(so);
  mine.set_epoch(2);
  std::vector<int64_t> idx = mine.indices();
  if (faulty) idx[0] = (idx[0] + 1) % so.dataset_size;
  const Tensor all = acc.gather(torch::tensor(idx)).view({w, -1});
  for (int r = 0; r < w; ++r) {
    so.rank = r;
    const std::string bad = expect_equal(all[r], torch::tensor(xlaunch::shard_indices(so, 2)), ("shard of rank " + std::to_string(r)).c_str());
    if (!bad.empty()) return bad;
  }
  const Tensor counts = torch::bincount(all.flatten(), {}, so.dataset_size);
  if (counts.min().item<int64_t>() != 1 || counts.sum().item<int64_t>() != mine.shard_size() * w)
    return "the shards do not cover the " + std::to_string(so.dataset_size) + " samples exactly once: counts " + mismatch(counts, torch::ones_like(counts));
  return "";
}

// The index of each sample, as data: what the loader hands over says which samples were read.
struct Indices : torch::data::datasets::Dataset<Indices> {
  explicit Indices(size_t n) : n(n) {}
  torch::data::Example<> get(size_t i) override {
    return {torch::tensor({static_cast<float>(i)}), torch::tensor(static_cast<int64_t>(i))};
  }
  std::optional<size_t> size() const override { return n; }
  size_t n;
};

std::string check_loader(Accelerator& acc, bool faulty) {
  const int64_t n = 10 * acc.num_processes() + 3;
  xlaunch::LoaderOptions lo;
  lo.batch_size = 4;
  lo.seed = 3;
  auto& loader = acc.prepare(xlaunch::Loader(Indices(static_cast<size_t>(n)), lo));
  std::vector<Tensor> seen;
  for (auto& batch : loader) seen.push_back(acc.gather_for_metrics(batch.target, loader));
  Tensor all = torch::cat(seen);
  if (faulty) all[0].fill_(-1);
  return expect_equal(std::get<0>(all.sort()), torch::arange(n, on(acc, at::kLong)),
                      "sorted gather_for_metrics of an epoch (each sample once, padding dropped)");
}

torch::nn::Sequential small_net() {
  return torch::nn::Sequential(torch::nn::Linear(6, 16), torch::nn::Tanh(), torch::nn::Linear(16, 3));
}

// Rank r's batch: 4 rows, integer-valued inputs and targets from (rank, row, column).
std::pair<Tensor, Tensor> ddp_batch(int rank, const at::TensorOptions& o) {
  Tensor x = torch::empty({4, 6}), y = torch::empty({4, 3});
  for (int b = 0; b < 4; ++b) {
    for (int j = 0; j < 6; ++j) x[b][j] = ((rank * 7 + b * 3 + j * 5) % 11 - 5) / 4.0;
    for (int k = 0; k < 3; ++k) y[b][k] = (rank + b + k) % 5 - 2;
  }
  return {x.to(o), y.to(o)};
}

// The prepared model's averaged gradients equal those of one process on all ranks' batches
// concatenated (computed here on every rank); after a step, every rank holds the same weights.
std::string check_ddp(Accelerator& acc, bool faulty) {
  const int w = acc.num_processes();
  acc.set_seed(1234);
  auto reference = small_net();
  acc.set_seed(1234);
  auto model = acc.prepare(small_net());
  reference->to(acc.device());
  std::vector<Tensor> xs, ys;
  for (int r = 0; r < w; ++r) {
    auto [x, y] = ddp_batch(r, on(acc));
    xs.push_back(x);
    ys.push_back(y);
  }
  {
    xlaunch::AutocastGuard autocast(acc.device().type(), acc.mixed_precision());
    torch::mse_loss(reference->forward(torch::cat(xs)).to(at::kFloat), torch::cat(ys)).backward();
  }
  const int rank = acc.process_index();
  acc.backward(torch::mse_loss(model(xs[rank]).to(at::kFloat), ys[rank]));
  // What backward did to the loss besides averaging: accumulation's division (by the window the
  // launch asked for, which the Accelerator took from the same variable), fp16's scale.
  double factor = 1.0 / static_cast<double>(xlaunch::env::get_int(xlaunch::env::kGradAccumSteps));
  if (acc.scaler()) factor *= acc.scaler()->get_scale();
  const bool exact = acc.mixed_precision() == xlaunch::MixedPrecision::No;
  const auto mine = model->named_parameters();
  const auto ref = reference->named_parameters();
  std::string bad;
  for (size_t i = 0; i < mine.size() && bad.empty(); ++i) {
    Tensor got = mine[i].value().grad() / factor;
    if (faulty && i == 0) got = got + 1;
    const Tensor want = ref[i].value().grad();
    if (!torch::allclose(got, want, exact ? 1e-4 : 5e-2, exact ? 1e-6 : 1e-2))
      bad = "gradient of '" + mine[i].key() + "' " + mismatch(got, want) + " (the single-process reference)";
  }
  // The Accelerator keeps the prepared optimizer: it must outlive it.
  static torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  auto& opt = acc.prepare(sgd);
  opt.step();
  std::vector<Tensor> flat;
  for (const auto& p : model->parameters()) flat.push_back(p.detach().flatten().to(at::kDouble));
  const Tensor all = acc.gather(torch::cat(flat).unsqueeze(0));
  for (int r = 1; r < w && bad.empty(); ++r)
    if (!all[r].equal(all[0])) bad = "after a step, rank " + std::to_string(r) + "'s weights differ from rank 0's";
  return bad;
}

// An inf in one rank's gradient (the last rank's, at step 1) makes every rank skip that step and
// halve the scale; the other steps update; after 2 clean steps the scale doubles again.
std::string check_scaler(Accelerator& acc, bool faulty) {
  xlaunch::GradScalerOptions so;
  so.init_scale = 1024;
  so.growth_interval = 2;
  xlaunch::GradScaler scaler(so, acc.communicator(acc.device()));
  Tensor wt = torch::zeros({4}, on(acc)).requires_grad_(true);
  torch::optim::SGD sgd({wt}, torch::optim::SGDOptions(0.5));
  const bool want_skipped[] = {false, true, false, false};
  const double want_scale[] = {1024, 512, 512, 1024};
  std::string bad;
  for (int step = 0; step < 4; ++step) {
    sgd.zero_grad();
    scaler.scale(wt.sum()).backward();
    if (step == 1 && acc.process_index() == acc.num_processes() - 1)
      wt.mutable_grad()[2].fill_(std::numeric_limits<float>::infinity());
    scaler.step(sgd);
    scaler.update();
    const bool skipped = scaler.last_step_skipped() != (faulty && step == 1);
    if (bad.empty() && (skipped != want_skipped[step] || scaler.get_scale() != want_scale[step]))
      bad = "step " + std::to_string(step) + (skipped ? " skipped" : " stepped") + " with scale " +
            std::to_string(scaler.get_scale()) + "; expected " + (want_skipped[step] ? "skipped" : "stepped") +
            " with scale " + std::to_string(want_scale[step]) + " (inf injected on rank " +
            std::to_string(acc.num_processes() - 1) + " at step 1)";
  }
  return bad.empty() ? expect_equal(wt.detach(), torch::full({4}, -1.5, on(acc)), "weights after 3 of 4 steps of lr 0.5") : bad;
}

struct Check {
  const char* slug;  // for --fault
  const char* title;
  CheckFn fn;
};

const std::vector<Check> kChecks = {
    {"place", "rank and world size seen by every process", check_place},
    {"allreduce", "allreduce (sum, mean, max)", check_allreduce},
    {"gather", "gather", check_gather},
    {"broadcast", "broadcast (from the first and the last rank)", check_broadcast},
    {"sampler", "sampler sharding (DistributedSampler)", check_sampler},
    {"loader", "loader shards and gather_for_metrics", check_loader},
    {"ddp", "DDP gradients against one process", check_ddp},
    {"scaler", "GradScaler: an inf on one rank skips the step on every rank", check_scaler},
};

// "pass" or the failure, per check, in kChecks order: what each rank sends rank 0.
std::vector<std::string> run_checks(Accelerator& acc, const std::string& fault_slug, int fault_rank) {
  std::vector<std::string> out;
  for (const Check& c : kChecks) {
    const bool faulty = fault_slug == c.slug && fault_rank == acc.process_index();
    try {
      const std::string bad = c.fn(acc, faulty);
      out.push_back(bad.empty() ? "pass" : bad);
    } catch (const std::exception& e) {
      out.push_back(std::string("error: ") + e.what());
    }
  }
  return out;
}

std::string join_lines(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + "\n";
  return s;
}

// Prints one line per check (rank 0) and returns whether every rank passed every check.
bool report(Accelerator& acc, const std::vector<std::string>& mine) {
  std::vector<std::string> flat;
  for (std::string v : mine) {
    for (char& c : v)
      if (c == '\n') c = ' ';
    flat.push_back(v);
  }
  const auto per_rank = acc.communicator(at::kCPU)->allgather_strings(join_lines(flat));
  std::vector<std::vector<std::string>> verdicts(per_rank.size());  // [rank][check]
  for (size_t r = 0; r < per_rank.size(); ++r) {
    std::istringstream in(per_rank[r]);
    for (std::string v; std::getline(in, v);) verdicts[r].push_back(v);
  }
  std::string failed;
  for (size_t i = 0; i < kChecks.size(); ++i) {
    std::string ranks, detail;
    for (size_t r = 0; r < verdicts.size(); ++r) {
      const std::string& v = verdicts[r].at(i);
      if (v == "pass") continue;
      ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
      detail += "\n      rank " + std::to_string(r) + ": " + v;
    }
    const bool many = ranks.find(',') != std::string::npos;
    if (!ranks.empty()) failed += std::string(failed.empty() ? "" : "; ") + kChecks[i].title + " on rank" + (many ? "s " : " ") + ranks;
    acc.print("  ", ranks.empty() ? "PASS" : "FAIL", "  ", kChecks[i].title, detail);
  }
  if (failed.empty())
    acc.print("xlaunch test: all ", kChecks.size(), " checks passed on ", acc.num_processes(), " process",
              acc.num_processes() > 1 ? "es" : "");
  else
    acc.print("xlaunch test: FAILED: ", failed);
  return failed.empty();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"xlaunch's self-check, launched by `xlaunch test`"};
  std::string fault;
  app.add_option("--fault", fault, "CHECK@RANK: that rank corrupts its result of CHECK (to test the test)");
  CLI11_PARSE(app, argc, argv);
  const size_t at = fault.find('@');
  const std::string fault_slug = fault.substr(0, at);
  const int fault_rank = at == std::string::npos ? 0 : std::stoi(fault.substr(at + 1));
  try {
    Accelerator acc;
    acc.print("xlaunch test: ", acc.num_processes(), " process", acc.num_processes() > 1 ? "es" : "", ", device ",
              acc.device(), ", communicator ", acc.communicator(acc.device())->name(), ", mixed precision ",
              acc.options().mixed_precision);
    return report(acc, run_checks(acc, fault_slug, fault_rank)) ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "xlaunch test: rank %d: error: %s\n", xlaunch::ProcessState::get().rank(), e.what());
    return 1;
  }
}
