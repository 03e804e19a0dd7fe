// ZeRO stage 3 (fully sharded, ddp/units.h, stages/stage3.cpp) with ranks as threads: a small
// decoder-like model (a root embedding whose weight the output projection shares, blocks in a
// Sequential, a block declared FullyShard, a frozen layer, parameters of odd sizes) trained for 50
// steps on 1 to 4 ranks, against one process training on every rank's batch at once, and against
// stage 0 on as many ranks; with SGD and momentum, AdamW with two parameter groups, accumulation,
// fp16 skips and clipping. Between steps every rank holds only its shard: the units' parameters are
// empty, and the optimizer state is 1/W. Uneven inputs (a rank joining the others). And the
// refusals: tied weights across units, what a joined rank cannot repeat.
#include <gtest/gtest.h>

#include <ATen/ops/cat.h>
#include <ATen/ops/rand.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/linear.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/optim/adamw.h>
#include <torch/optim/lbfgs.h>
#include <torch/optim/sgd.h>
#include <torch/csrc/autograd/function.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <limits>
#include <mutex>

#include "inprocess_ranks.h"
#include "models.h"
#include "scratch_dir.h"
#include "xlaunch/accelerator.h"
#include "xlaunch/error.h"
#include "xlaunch/fully_shard.h"
#include "fsdp_model.h"
#include "ddp/units.h"
#include "xlaunch/wrap_policy.h"

using namespace xlaunch::test;

namespace {

enum class Opt { Sgd, AdamW };

struct Job {
  int world = 2;
  int stage = 3;
  Opt opt = Opt::AdamW;
  int accumulation = 1;
  bool fp16 = false;
  double clip = 0;
  int prefetch = 1;
  bool reshard = true;
  bool recompute = false;    // fsdp.activation_checkpointing
  std::string wrap = "auto";  // fsdp.wrap
  bool uneven = false;        // rank r runs 3r steps fewer, then joins the others (acc.join)
  bool bf16 = false;          // mixed_precision bf16 (autocast)
  std::string param_dtype = "fp32";  // fsdp.param_dtype
  bool pattern = false;       // learnable batches (pattern_tokens) instead of uniform ones
  bool one_process = false;  // one rank training on every rank's batch of `world`
  int from = 0;              // the first step's index (its batches)
  std::string load;          // a checkpoint to load after prepare
  std::string save;          // a checkpoint to save after the last step
};

struct Result {
  std::vector<at::Tensor> params;  // rank 0's, after the last step
  std::vector<int64_t> state_bytes;
  int skipped = 0;
  bool sharded_between_steps = true;  // every unit's parameters empty after each step, every rank
  std::vector<double> losses;          // rank 0's, per optimizer step
  at::ScalarType root_in_step = at::kFloat, root_between = at::kFloat;  // the root's dtype, rank 0
};

// Rank r's batch of step s where the next token follows from the last one, mostly: 3t + 5 mod V,
// and 20% of the time any token. Something to learn, for loss curves.
at::Tensor pattern_tokens(int rank, int step) {
  auto gen = at::detail::createCPUGenerator(900 + 101 * step + rank);
  const at::Tensor noise = at::randint(0, kVocab, {4, kSeq + 1}, gen, at::kLong);
  const at::Tensor coin = at::rand({4, kSeq + 1}, gen);
  at::Tensor t = noise.clone();
  auto a = t.accessor<int64_t, 2>();
  auto c = coin.accessor<float, 2>();
  for (int64_t b = 0; b < t.size(0); ++b)
    for (int64_t j = 1; j < t.size(1); ++j)
      if (c[b][j] >= 0.2f) a[b][j] = (3 * a[b][j - 1] + 5) % kVocab;
  return t;
}

Result train(const Job& s, int steps = 50) {
  torch::manual_seed(11);
  Net init;
  Result out;
  const int ranks = s.one_process ? 1 : s.world;
  out.state_bytes.resize(ranks);
  std::mutex mu;
  run_ranks(ranks, [&](std::shared_ptr<xlaunch::InProcessCommunicator> c) {
    xlaunch::AcceleratorOptions o;
    o.cpu = true;
    o.ddp.zero_stage = s.stage;
    o.ddp.fsdp_prefetch = s.prefetch;
    o.ddp.reshard_after_forward = s.reshard;
    o.ddp.fsdp_activation_checkpointing = s.recompute;
    o.ddp.fsdp_wrap = s.wrap;
    o.ddp.fsdp_param_dtype = s.param_dtype;
    if (s.bf16) o.mixed_precision = "bf16";
    o.gradient_accumulation_steps = s.accumulation;
    if (s.fp16) {
      o.mixed_precision = "fp16";
      o.scaler.init_scale = 1024;
    }
    xlaunch::Accelerator acc(o, c);
    Net net;
    copy_state(*net, *init);
    auto model = acc.prepare(net);
    std::unique_ptr<torch::optim::Optimizer> inner;
    std::vector<at::Tensor> trainable;
    for (const auto& p : net->parameters())
      if (p.requires_grad()) trainable.push_back(p);
    if (s.opt == Opt::Sgd) {
      inner = std::make_unique<torch::optim::SGD>(trainable, torch::optim::SGDOptions(0.05).momentum(0.9));
    } else {
      std::vector<at::Tensor> decay, no_decay;
      for (const auto& p : net->named_parameters()) {
        if (!p.value().requires_grad()) continue;
        (p.value().dim() < 2 ? no_decay : decay).push_back(p.value());
      }
      std::vector<torch::optim::OptimizerParamGroup> groups;
      groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(0.01).weight_decay(0.1)));
      groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(0.01).weight_decay(0)));
      inner = std::make_unique<torch::optim::AdamW>(groups, torch::optim::AdamWOptions(0.01));
    }
    auto& opt = acc.prepare(*inner);
    if (!s.load.empty()) acc.load_state(s.load);
    if (s.uneven) acc.expect_uneven_inputs();
    int skipped = 0;
    bool sharded = true;
    const int my_steps = s.uneven ? steps - 3 * c->rank() : steps;
    for (int step = 0; step < my_steps; ++step) {
      for (int micro = 0; micro < s.accumulation; ++micro) {
        acc.accumulate();
        const int at = (s.from + step) * s.accumulation + micro;
        at::Tensor t;
        if (s.one_process) {
          std::vector<at::Tensor> all;
          for (int r = 0; r < s.world; ++r) all.push_back(s.pattern ? pattern_tokens(r, at) : tokens(r, at));
          t = at::cat(all);
        } else {
          t = s.pattern ? pattern_tokens(c->rank(), at) : tokens(c->rank(), at);
        }
        const at::Tensor logits = model(t.narrow(1, 0, kSeq));
        if (c->rank() == 0) out.root_in_step = net->tok->weight.scalar_type();  // whole until its reduce-scatter
        at::Tensor loss = torch::nn::functional::cross_entropy(logits.reshape({-1, kVocab}),
                                                               t.narrow(1, 1, kSeq).reshape({-1}));
        if (s.fp16 && c->rank() == 1 % ranks && (step == 3 || step == 17) && micro + 1 == s.accumulation)
          loss = loss * std::numeric_limits<float>::infinity();
        acc.backward(loss);
        if (s.clip > 0 && acc.sync_gradients()) acc.clip_grad_norm_(s.clip);
        opt.step();
        opt.zero_grad();
        if (c->rank() == 0 && micro + 1 == s.accumulation) out.losses.push_back(loss.item<double>());
      }
      if (c->rank() == 0) out.root_between = net->tok->weight.scalar_type();
      if (opt.step_was_skipped()) ++skipped;
      if (s.stage == 3)
        for (const auto& p : net->blocks->parameters())
          sharded = sharded && p.numel() > 1 && p.storage().nbytes() <= static_cast<size_t>(p.element_size());
    }
    if (s.uneven) acc.join();
    // The trained model, whole (collective at stage 3).
    if (!s.save.empty()) acc.save_state(s.save);
    const auto state = acc.get_state_dict(model);
    std::lock_guard<std::mutex> lk(mu);
    out.state_bytes[c->rank()] = opt.state_bytes();
    out.sharded_between_steps = out.sharded_between_steps && sharded;
    if (c->rank() == 0) {
      out.skipped = skipped;
      for (const auto& [name, t] : state) out.params.push_back(t);
    }
  });
  return out;
}

void expect_close(const Result& got, const Result& want, double tol, const std::string& what) {
  ASSERT_EQ(got.params.size(), want.params.size()) << what;
  for (size_t i = 0; i < got.params.size(); ++i)
    EXPECT_LE(rel_err(got.params[i], want.params[i]), tol) << what << ": tensor " << i;
}

// What `fn` throws as UsageError on 2 ranks at stage 3 (comm hook `hook`), the same on both ranks.
// (At `stage` when it is not 3: what a stage-3 setting meets below it.)
std::string stage3_refusal(const std::function<void(xlaunch::Accelerator&)>& fn, const std::string& hook = "none",
                           bool recompute = false, int stage = 3, const std::string& wrap = "auto") {
  std::vector<std::string> what(2);
  run_ranks(2, [&](std::shared_ptr<xlaunch::InProcessCommunicator> c) {
    xlaunch::AcceleratorOptions o;
    o.cpu = true;
    o.ddp.zero_stage = stage;
    o.ddp.comm_hook = hook;
    o.ddp.fsdp_activation_checkpointing = recompute;
    o.ddp.fsdp_wrap = wrap;
    xlaunch::Accelerator acc(o, c);
    try {
      fn(acc);
    } catch (const xlaunch::UsageError& e) {
      what[c->rank()] = e.what();
    }
  });
  EXPECT_EQ(what[0], what[1]) << "every rank says the same";
  return what[0];
}

}  // namespace

class Stage3Equivalence : public ::testing::TestWithParam<std::tuple<int, Opt>> {};

// W ranks at stage 3 against one process on every rank's batch, and against stage 0 on W ranks.
TEST_P(Stage3Equivalence, MatchesOneProcessAndStageZero) {
  const auto [world, opt] = GetParam();
  Job s;
  s.world = world;
  s.opt = opt;
  const Result got = train(s);
  EXPECT_TRUE(got.sharded_between_steps);
  Job one = s;
  one.stage = 0;
  one.one_process = true;
  expect_close(got, train(one), 1e-5, "against one process");
  Job zero = s;
  zero.stage = 0;
  const Result ref = train(zero);
  expect_close(got, ref, 1e-5, "against stage 0");
  for (int r = 0; r < world; ++r)
    EXPECT_LE(static_cast<double>(got.state_bytes[r]), 1.1 * static_cast<double>(ref.state_bytes[r]) / world + 64)
        << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Worlds, Stage3Equivalence,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4), ::testing::Values(Opt::Sgd, Opt::AdamW)));

// Stage 2 does the same arithmetic (its reduce-scatters, its clipping over shards): stage 3 matches
// it; and stage 0 within fp16's rounding of other sums.
TEST(Stage3, AccumulationWithFp16SkipsOrClippingMatchesStageTwo) {
  for (const bool fp16 : {true, false}) {
    Job s;
    s.world = 3;
    s.accumulation = 2;
    s.fp16 = fp16;
    s.clip = fp16 ? 0 : 0.5;
    const std::string what = fp16 ? "accumulation and fp16 skips" : "accumulation and clipping";
    const Result got = train(s, 20);
    EXPECT_EQ(got.skipped, fp16 ? 2 : 0) << what;
    Job two = s;
    two.stage = 2;
    expect_close(got, train(two, 20), 1e-6, what + " against stage 2");
    Job zero = s;
    zero.stage = 0;
    expect_close(got, train(zero, 20), 1e-5, what + " against stage 0");
  }
}

TEST(Stage3, PrefetchAndReshardSettingsChangeNoResult) {
  Job s;
  s.world = 2;
  const Result base = train(s, 10);
  for (const auto& [prefetch, reshard] : {std::pair{0, true}, std::pair{2, true}, std::pair{1, false}}) {
    Job v = s;
    v.prefetch = prefetch;
    v.reshard = reshard;
    const Result got = train(v, 10);
    expect_close(got, base, 0, "prefetch " + std::to_string(prefetch) + " reshard " + std::to_string(reshard));
  }
}

struct SharedImpl : torch::nn::Module {
  explicit SharedImpl(torch::nn::Linear shared) : lin(register_module("lin", shared)) {}
  at::Tensor forward(const at::Tensor& x) { return lin(x); }
  torch::nn::Linear lin;
};
TORCH_MODULE(Shared);

// Activation checkpointing recomputes each unit (the Sequential's blocks, the FullyShard block) in
// its backward: the same gradients to the last bit, with and without reshard after forward, on 1
// and 3 ranks, with fp16's scaler and skips.
TEST(Stage3, ActivationCheckpointingChangesNoResult) {
  for (const auto& [world, reshard, fp16] : {std::tuple{1, true, false}, std::tuple{3, true, true},
                                              std::tuple{2, false, false}}) {
    Job s;
    s.world = world;
    s.reshard = reshard;
    s.fp16 = fp16;
    const Result base = train(s, 10);
    Job v = s;
    v.recompute = true;
    const Result got = train(v, 10);
    EXPECT_TRUE(got.sharded_between_steps);
    EXPECT_EQ(got.skipped, base.skipped);
    expect_close(got, base, 0, "world " + std::to_string(world) + " reshard " + std::to_string(reshard) + " fp16 " +
                                   std::to_string(fp16));
  }
}

// A unit with dropout, counting its forwards: recomputed, it runs twice a step and draws the same
// mask again (the generator is put back for the recomputation, and left as without it), and bf16
// autocast is on again while it recomputes. Each against the same run without checkpointing.
std::atomic<int> dropout_forwards{0};
struct DropBlockImpl : torch::nn::Module {
  DropBlockImpl() : lin(register_module("lin", torch::nn::Linear(8, 8))), drop(register_module("drop", torch::nn::Dropout(0.5))) {}
  at::Tensor forward(const at::Tensor& x) {
    ++dropout_forwards;
    return x + drop(torch::nn::functional::gelu(lin(x)));
  }
  torch::nn::Linear lin;
  torch::nn::Dropout drop;
};
TORCH_MODULE(DropBlock);

std::vector<at::Tensor> train_dropout(bool recompute, const std::string& precision, int* forwards) {
  torch::manual_seed(5);
  torch::nn::Sequential init(torch::nn::Linear(4, 8), DropBlock(), DropBlock(), torch::nn::Linear(8, 3));
  std::vector<at::Tensor> out;
  dropout_forwards = 0;
  // One rank: the global generator is this thread's alone (ranks as threads would share it).
  run_ranks(1, [&](std::shared_ptr<xlaunch::InProcessCommunicator> c) {
    xlaunch::AcceleratorOptions o;
    o.cpu = true;
    o.ddp.zero_stage = 3;
    o.ddp.fsdp_activation_checkpointing = recompute;
    o.mixed_precision = precision;
    xlaunch::Accelerator acc(o, c);
    torch::nn::Sequential net(torch::nn::Linear(4, 8), DropBlock(), DropBlock(), torch::nn::Linear(8, 3));
    copy_state(*net, *init);
    auto model = acc.prepare(net);
    torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.1));
    auto& opt = acc.prepare(sgd);
    torch::manual_seed(100);
    for (int step = 0; step < 5; ++step) {
      const Batch b = mlp_batch(0, step);
      acc.backward(torch::nn::functional::cross_entropy(model(b.x.narrow(1, 0, 4)), b.y.remainder(3)));
      opt.step();
      opt.zero_grad();
    }
    // The generator goes on as without recomputation.
    out.push_back(at::rand({4}));
    for (const auto& [name, t] : acc.get_state_dict(model)) out.push_back(t);
  });
  *forwards = dropout_forwards;
  return out;
}

TEST(Stage3, ActivationCheckpointingReplaysDropoutAndAutocast) {
  for (const std::string precision : {"no", "bf16"}) {
    int plain = 0, recomputed = 0;
    const std::vector<at::Tensor> want = train_dropout(false, precision, &plain);
    const std::vector<at::Tensor> got = train_dropout(true, precision, &recomputed);
    EXPECT_EQ(plain, 2 * 5) << precision;               // 2 blocks, 5 steps
    EXPECT_EQ(recomputed, 2 * plain) << precision;      // each forward again in backward
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(rel_err(got[i], want[i]), 0) << precision << " tensor " << i;
  }
}

// What autograd keeps of a checkpointed forward: one node per unit (the Sequential's two blocks and
// the FullyShard one), and nothing of what runs inside them (GELU is only there).
std::map<std::string, int> graph_nodes(bool recompute) {
  std::map<std::string, int> names;
  run_ranks(1, [&](std::shared_ptr<xlaunch::InProcessCommunicator> c) {
    xlaunch::AcceleratorOptions o;
    o.cpu = true;
    o.ddp.zero_stage = 3;
    o.ddp.fsdp_activation_checkpointing = recompute;
    xlaunch::Accelerator acc(o, c);
    Net net;
    auto model = acc.prepare(net);
    const at::Tensor logits = model(tokens(0, 0).narrow(1, 0, kSeq));
    std::vector<std::shared_ptr<torch::autograd::Node>> todo{logits.grad_fn()};
    std::set<torch::autograd::Node*> seen;
    while (!todo.empty()) {
      auto node = todo.back();
      todo.pop_back();
      if (!node || !seen.insert(node.get()).second) continue;
      ++names[node->name()];
      for (const auto& edge : node->next_edges()) todo.push_back(edge.function);
    }
  });
  return names;
}

TEST(Stage3, ActivationCheckpointingKeepsOnlyEachUnitsInputs) {
  const std::map<std::string, int> kept = graph_nodes(false), recomputed = graph_nodes(true);
  EXPECT_EQ(kept.count("xlaunch::RecomputeUnit"), 0u);
  EXPECT_GE(kept.count("GeluBackward0"), 1u);
  ASSERT_EQ(recomputed.count("xlaunch::RecomputeUnit"), 1u);
  EXPECT_EQ(recomputed.at("xlaunch::RecomputeUnit"), 3);
  EXPECT_EQ(recomputed.count("GeluBackward0"), 0u);
}

struct RootAndUnitImpl : torch::nn::Module {
  RootAndUnitImpl() {
    lin = register_module("lin", torch::nn::Linear(4, 4));
    seq = register_module("seq", torch::nn::Sequential(Shared(lin)));
  }
  at::Tensor forward(const at::Tensor& x) { return seq->forward(lin(x)); }
  torch::nn::Linear lin{nullptr};
  torch::nn::Sequential seq{nullptr};
};
TORCH_MODULE(RootAndUnit);

struct TwiceImpl : torch::nn::Module {
  TwiceImpl() { block = register_module("block", xlaunch::FullyShard<Block>()); }
  at::Tensor forward(const at::Tensor& x) { return block(block(x)); }
  xlaunch::FullyShard<Block> block{nullptr};
};
TORCH_MODULE(Twice);

// What a recomputation cannot do right is refused, naming the module and the fix: a root
// parameter used inside a unit (at prepare), a unit called twice in one forward.
TEST(Stage3, ActivationCheckpointingRefusesWhatItCannotRecompute) {
  const std::string root = stage3_refusal([](xlaunch::Accelerator& acc) {
    RootAndUnit net;
    acc.prepare(net);
  }, "none", true);
  EXPECT_NE(root.find("lin.weight' belongs to the root unit and is used inside unit 'seq.0'"),
            std::string::npos) << root;
  EXPECT_NE(root.find("fsdp.activation_checkpointing: false"), std::string::npos) << root;
  const std::string twice = stage3_refusal([](xlaunch::Accelerator& acc) {
    Twice net;
    auto model = acc.prepare(net);
    model(at::randn({2, kDim}));
  }, "none", true);
  EXPECT_NE(twice.find("unit 'block' was called twice in one forward"), std::string::npos) << twice;
}

TEST(Stage3, ActivationCheckpointingBelowStageThreeIsRefused) {
  const std::string what = stage3_refusal([](xlaunch::Accelerator& acc) {
    Net net;
    acc.prepare(net);
  }, "none", true, 2);
  EXPECT_NE(what.find("fsdp.activation_checkpointing"), std::string::npos) << what;
  EXPECT_NE(what.find("Set ddp.zero_stage: 3"), std::string::npos) << what;
}


// ---- the mixed-precision policy (fsdp.param_dtype) ---------------------------------------------

namespace {

// The mean loss of each window of `n` steps.
std::vector<double> windows(const std::vector<double>& losses, size_t n) {
  std::vector<double> out;
  for (size_t k = 0; k + n <= losses.size(); k += n) {
    double sum = 0;
    for (size_t j = k; j < k + n; ++j) sum += losses[j];
    out.push_back(sum / static_cast<double>(n));
  }
  return out;
}

void expect_curves_within(const Result& got, const Result& want, double rel, const std::string& what) {
  const std::vector<double> a = windows(got.losses, 20), b = windows(want.losses, 20);
  ASSERT_EQ(a.size(), b.size()) << what;
  ASSERT_FALSE(a.empty()) << what;
  EXPECT_LT(b.back(), 0.8 * b.front()) << what << ": the run learns something";
  double worst = 0;
  for (size_t k = 0; k < a.size(); ++k) {
    EXPECT_LE(std::abs(a[k] - b[k]), rel * b[k]) << what << ": steps " << 20 * k << "-" << 20 * k + 19;
    worst = std::max(worst, std::abs(a[k] - b[k]) / b[k]);
  }
  std::printf("fsdp %s: loss %.3f -> %.3f (reference %.3f -> %.3f), largest window difference %.2f%%\n", what.c_str(),
              a.front(), a.back(), b.front(), b.back(), 100 * worst);
}

}  // namespace

// Units gathered and computed in bf16 (half the gathered bytes), while the shards, the reduction
// and AdamW stay fp32: over 200 steps the loss curve is within 1% of the same job's with fp32
// parameters (under bf16 autocast both), on 2 and 3 ranks, with activation checkpointing too.
// Between steps the parameters are fp32 again, and the trained model comes out in fp32, exactly
// (not rounded to bf16).
TEST(Stage3MixedPrecision, Bf16ParametersTrainLikeFp32Ones) {
  for (const auto& [world, recompute] : {std::pair{2, false}, std::pair{3, true}}) {
    Job s;
    s.world = world;
    s.bf16 = true;
    s.pattern = true;
    s.recompute = recompute;
    const Result fp32 = train(s, 200);
    EXPECT_EQ(fp32.root_in_step, at::kFloat);
    Job low = s;
    low.param_dtype = "bf16";
    const Result got = train(low, 200);
    const std::string what = std::to_string(world) + " ranks" + (recompute ? ", activation checkpointing" : "");
    EXPECT_EQ(got.root_in_step, at::kBFloat16) << what;
    EXPECT_EQ(got.root_between, at::kFloat) << what;
    EXPECT_TRUE(got.sharded_between_steps) << what;
    expect_curves_within(got, fp32, 0.01, what);
    bool beyond_bf16 = false;
    for (const at::Tensor& p : got.params) {
      EXPECT_EQ(p.scalar_type(), at::kFloat) << what;
      beyond_bf16 = beyond_bf16 || !p.to(at::kBFloat16).to(at::kFloat).equal(p);
    }
    EXPECT_TRUE(beyond_bf16) << what << ": the state dict holds the fp32 shards, not the bf16 gathers";
  }
}

// fp16 parameters with the GradScaler: the skipped steps are skipped alike, and the curve follows
// the fp32-parameter run's.
TEST(Stage3MixedPrecision, Fp16ParametersWorkWithTheGradScaler) {
  Job s;
  s.world = 2;
  s.fp16 = true;
  s.pattern = true;
  const Result fp32 = train(s, 100);
  Job low = s;
  low.param_dtype = "fp16";
  const Result got = train(low, 100);
  EXPECT_EQ(got.skipped, 2);
  EXPECT_EQ(got.skipped, fp32.skipped);
  EXPECT_EQ(got.root_in_step, at::kHalf);
  expect_curves_within(got, fp32, 0.01, "fp16");
}

// A forward without backward (an evaluation) leaves the root gathered, in bf16; a state dict (or a
// checkpoint) after it still holds the exact fp32 values.
TEST(Stage3MixedPrecision, AStateDictAfterAnEvaluationForwardIsExact) {
  std::vector<std::vector<at::Tensor>> got(2);  // rank 0's, without and with the evaluation forward
  torch::manual_seed(11);
  Net init;  // (made once: the ranks' threads share the generator)
  for (const bool eval : {false, true}) {
    run_ranks(2, [&](std::shared_ptr<xlaunch::InProcessCommunicator> c) {
      xlaunch::AcceleratorOptions o;
      o.cpu = true;
      o.ddp.zero_stage = 3;
      o.mixed_precision = "bf16";
      o.ddp.fsdp_param_dtype = "bf16";
      xlaunch::Accelerator acc(o, c);
      Net net;
      copy_state(*net, *init);
      auto model = acc.prepare(net);
      if (eval) {
        const at::NoGradGuard no_grad;
        model(tokens(c->rank(), 0).narrow(1, 0, kSeq));
        EXPECT_EQ(net->tok->weight.scalar_type(), at::kBFloat16);  // the root, still whole
      }
      const auto state = acc.get_state_dict(model);
      if (c->rank() != 0) return;
      for (const auto& [name, t] : state) got[eval].push_back(t);
    });
  }
  ASSERT_EQ(got[0].size(), got[1].size());
  ASSERT_FALSE(got[0].empty());
  for (size_t i = 0; i < got[0].size(); ++i) {
    EXPECT_EQ(got[1][i].scalar_type(), at::kFloat) << "tensor " << i;
    EXPECT_TRUE(got[1][i].equal(got[0][i])) << "tensor " << i;
  }
}

// What the policy cannot do is refused on every rank at prepare, naming the fix.
TEST(Stage3MixedPrecision, RefusesWhatItCannotDo) {
  const auto refusal = [](int stage, const std::string& mixed) {
    std::vector<std::string> what(2);
    run_ranks(2, [&](std::shared_ptr<xlaunch::InProcessCommunicator> c) {
      xlaunch::AcceleratorOptions o;
      o.cpu = true;
      o.ddp.zero_stage = stage;
      o.ddp.fsdp_param_dtype = "bf16";
      o.mixed_precision = mixed;
      xlaunch::Accelerator acc(o, c);
      try {
        Net net;
        acc.prepare(net);
      } catch (const xlaunch::UsageError& e) {
        what[c->rank()] = e.what();
      }
    });
    EXPECT_EQ(what[0], what[1]);
    return what[0];
  };
  const std::string below = refusal(2, "bf16");
  EXPECT_NE(below.find("Set ddp.zero_stage: 3"), std::string::npos) << below;
  const std::string no_autocast = refusal(3, "no");
  EXPECT_NE(no_autocast.find("Set mixed_precision: bf16"), std::string::npos) << no_autocast;
  EXPECT_NE(refusal(3, "fp16").find("mixed_precision is 'fp16'"), std::string::npos);
}

// ---- the wrap policy (fsdp.wrap, xlaunch/wrap_policy.h) ----------------------------------------

namespace {

// A Sequential that a Sequential can hold (AnyModule needs a forward of fixed types).
struct StackImpl : torch::nn::SequentialImpl {
  using SequentialImpl::SequentialImpl;
  at::Tensor forward(at::Tensor x) { return SequentialImpl::forward(x); }
};
TORCH_MODULE(Stack);

// A Sequential inside a Sequential, and a plain member: Linear(4,4) ReLU Linear(4,8) | Linear(8,4) | head.
struct NestedImpl : torch::nn::Module {
  NestedImpl() {
    layers = register_module("layers", torch::nn::Sequential(Stack(torch::nn::Linear(4, 4), torch::nn::ReLU(),
                                                                   torch::nn::Linear(4, 8)),
                                                             torch::nn::Linear(8, 4)));
    head = register_module("head", torch::nn::Linear(4, 2));
  }
  torch::nn::Sequential layers{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(Nested);

struct Cut {
  std::vector<std::string> units;  // their paths
  std::vector<std::string> root;   // the root unit's parameters
  std::string refused;             // or what plan_units said
};

// How `policy` cuts `model`.
Cut cut(const std::shared_ptr<torch::nn::Module>& model, const std::string& policy) {
  std::vector<at::Tensor> params;
  std::vector<std::string> names;
  for (const auto& p : model->named_parameters())
    if (p.value().requires_grad()) {
      params.push_back(p.value());
      names.push_back(p.key());
    }
  Cut c;
  try {
    const xlaunch::UnitPlan plan = xlaunch::plan_units(model, params, names, *xlaunch::WrapPolicy::parse(policy));
    c.units = plan.names;
    if (plan.root_bucket >= 0)
      for (size_t i : plan.buckets[plan.root_bucket]) c.root.push_back(names[i]);
  } catch (const xlaunch::UsageError& e) {
    c.refused = e.what();
  }
  return c;
}

using Names = std::vector<std::string>;

}  // namespace

// Each policy takes the candidates (Sequential entries, FullyShard modules) it names; a candidate
// it does not take is looked into; what no unit takes is the root's.
TEST(Stage3WrapPolicy, ChoosesTheUnits) {
  Net net;
  const Names all = {"blocks.0", "blocks.1", "extra"};
  EXPECT_EQ(cut(net.ptr(), "auto").units, all);
  EXPECT_EQ(cut(net.ptr(), "type:Block").units, all);
  EXPECT_EQ(cut(net.ptr(), "type:xlaunch::test::Block").units, all);
  EXPECT_EQ(cut(net.ptr(), "type:BlockImpl").units, all);
  EXPECT_EQ(cut(net.ptr(), "size:768").units, all);  // a block: 26 + 378 + 364 parameters
  const Cut named = cut(net.ptr(), "name:blocks.*");
  EXPECT_EQ(named.units, (Names{"blocks.0", "blocks.1"}));
  EXPECT_NE(std::find(named.root.begin(), named.root.end(), "extra.up.weight"), named.root.end());
  const Cut none = cut(net.ptr(), "none");
  EXPECT_TRUE(none.units.empty());
  EXPECT_EQ(none.root.size(), cut(net.ptr(), "auto").root.size() + 3 * 6);  // every block's 6 tensors too

  Nested nested;
  EXPECT_EQ(cut(nested.ptr(), "auto").units, (Names{"layers.0", "layers.1"}));
  // layers.0 is not named: its entries are units; layers.1 is not named and has none: the root's.
  const Cut inner = cut(nested.ptr(), "name:layers.0.*");
  EXPECT_EQ(inner.units, (Names{"layers.0.0", "layers.0.2"}));
  EXPECT_EQ(inner.root, (Names{"layers.1.weight", "layers.1.bias", "head.weight", "head.bias"}));
  EXPECT_EQ(cut(nested.ptr(), "size:40").units, (Names{"layers.0"}));  // 60 and 36 parameters
}

// A policy that cannot be followed is refused, naming what the model has and the fix.
TEST(Stage3WrapPolicy, RefusesAPolicyItCannotFollow) {
  Net net;
  const std::string nothing = cut(net.ptr(), "type:other::Block").refused;
  EXPECT_NE(nothing.find("names no module of the model"), std::string::npos) << nothing;
  EXPECT_NE(nothing.find("Block, Embedding, LayerNorm, Linear, Sequential"), std::string::npos) << nothing;
  const std::string path = cut(net.ptr(), "name:layers.*").refused;
  EXPECT_NE(path.find("names no module"), std::string::npos) << path;
  // A Linear inside a block is no Sequential entry and not declared: its calls cannot be seen.
  const std::string hidden = cut(net.ptr(), "type:Linear").refused;
  EXPECT_NE(hidden.find("names module 'blocks.0.up' ("), std::string::npos) << hidden;
  EXPECT_NE(hidden.find("Declare it xlaunch::FullyShard"), std::string::npos) << hidden;
  EXPECT_NE(cut(net.ptr(), "name:tok").refused.find("names module 'tok' ("), std::string::npos);
  const std::string big = cut(net.ptr(), "size:769").refused;
  EXPECT_NE(big.find("the largest, 'blocks.0' ("), std::string::npos) << big;
  EXPECT_NE(big.find("holds 768"), std::string::npos) << big;
  // Through acc.prepare: on every rank alike (stage3_refusal compares them), and a spelling the
  // program set itself.
  const std::string prepared = stage3_refusal([](xlaunch::Accelerator& acc) {
    Net n;
    acc.prepare(n);
  }, "none", false, 3, "type:Attention");
  EXPECT_NE(prepared.find("fsdp.wrap type:Attention (XLAUNCH_FSDP_WRAP) names no module"), std::string::npos)
      << prepared;
  const std::string spelled = stage3_refusal([](xlaunch::Accelerator& acc) {
    Net n;
    acc.prepare(n);
  }, "none", false, 3, "size:lots");
  EXPECT_NE(spelled.find("fsdp.wrap (XLAUNCH_FSDP_WRAP) is 'size:lots'"), std::string::npos) << spelled;
}

// Whatever the cut, stage 3 trains as one process does; the blocks a policy leaves to the root are
// whole for the step and sharded between steps as before.
TEST(Stage3WrapPolicy, EveryCutTrainsAsOneProcess) {
  Job one;
  one.world = 3;
  one.stage = 0;
  one.one_process = true;
  const Result want = train(one, 20);
  for (const char* wrap : {"name:blocks.*", "none", "size:768"}) {
    Job s;
    s.world = 3;
    s.wrap = wrap;
    const Result got = train(s, 20);
    EXPECT_TRUE(got.sharded_between_steps) << wrap;
    expect_close(got, want, 1e-5, std::string("fsdp.wrap ") + wrap);
  }
}

TEST(Stage3, TiedWeightsAcrossUnitsAreRefusedNamingBoth) {
  const std::string what = stage3_refusal([](xlaunch::Accelerator& acc) {
    torch::nn::Linear lin(4, 4);
    torch::nn::Sequential seq{Shared(lin), Shared(lin)};
    acc.prepare(seq);
  });
  EXPECT_NE(what.find("is used by two units, '0' and '1'"), std::string::npos) << what;
  EXPECT_NE(what.find("Hold the shared module outside both units"), std::string::npos) << what;
}

// Uneven inputs: a rank whose data ended joins the others, repeating its last step's gathers and
// reduce-scatters (with zero gradients) while they train on. Against stage 0 and stage 2 under the
// same schedule (rank r runs 3r steps fewer), with clipping, whatever the order of the gathers
// (prefetch, reshard after forward, activation checkpointing) and the cut (a wrap policy).
TEST(Stage3, UnevenInputsJoinAndMatchStagesZeroAndTwo) {
  Job s;
  s.world = 3;
  s.uneven = true;
  s.clip = 0.5;
  Job zero = s;
  zero.stage = 0;
  const Result want = train(zero, 12);
  Job two = s;
  two.stage = 2;
  expect_close(train(two, 12), want, 1e-5, "stage 2, uneven");
  Job prefetch = s, kept = s, recompute = s, cut = s;
  prefetch.prefetch = 2;
  kept.reshard = false;
  recompute.recompute = true;
  cut.wrap = "name:blocks.*";
  for (const auto& [job, what] : {std::pair{s, "stage 3"}, std::pair{prefetch, "prefetch 2"},
                                  std::pair{kept, "reshard_after_forward false"},
                                  std::pair{recompute, "activation checkpointing"}, std::pair{cut, "name:blocks.*"}}) {
    const Result got = train(job, 12);
    EXPECT_TRUE(got.sharded_between_steps) << what;
    expect_close(got, want, 1e-5, std::string(what) + ", uneven");
  }
}

// What a joined rank cannot repeat is refused on every rank at prepare, naming the fix: micro-steps
// (gathers without a synced backward), and units some steps leave out.
TEST(Stage3, UnevenInputsWithAccumulationOrUnusedParametersAreRefused) {
  for (const bool unused : {false, true}) {
    std::vector<std::string> what(2);
    run_ranks(2, [&](std::shared_ptr<xlaunch::InProcessCommunicator> c) {
      xlaunch::AcceleratorOptions o;
      o.cpu = true;
      o.ddp.zero_stage = 3;
      if (unused) o.ddp.find_unused_parameters = true;
      else o.gradient_accumulation_steps = 2;
      xlaunch::Accelerator acc(o, c);
      Net net;
      acc.prepare(net);
      try {
        acc.expect_uneven_inputs();
      } catch (const xlaunch::UsageError& e) {
        what[c->rank()] = e.what();
      }
    });
    EXPECT_EQ(what[0], what[1]);
    EXPECT_NE(what[0].find("ddp.zero_stage 3"), std::string::npos) << what[0];
    EXPECT_NE(what[0].find(unused ? "find_unused_parameters false" : "gradient_accumulation_steps 1"),
              std::string::npos) << what[0];
  }
}


// Saved on 4 ranks at stage 3 (every rank's shard of the units, gathered for the save), resumed on
// the same layout: bitwise the uninterrupted run. Loaded on 3 ranks at stage 3, on 2 at stage 2 and
// on 1 process at stage 0: exactly the saved model, and training goes on.
TEST(Stage3, CheckpointsResumeExactlyAndLoadOnEveryLayout) {
  ScratchDir dir;
  Job straight;
  straight.world = 4;
  const Result want = train(straight, 10);
  Job first = straight;
  first.save = dir.path + "/ckpt";
  const Result saved = train(first, 6);
  Job second = straight;
  second.from = 6;
  second.load = first.save;
  const Result got = train(second, 4);
  expect_close(got, want, 0, "stopped at step 6 and resumed on the same layout");
  for (const auto& [world, stage] : {std::pair{3, 3}, std::pair{2, 2}, std::pair{1, 0}}) {
    Job other;
    other.world = world;
    other.stage = stage;
    other.load = first.save;
    other.from = 6;
    expect_close(train(other, 0), saved, 0, "loaded on " + std::to_string(world) + " ranks at stage " + std::to_string(stage));
    EXPECT_EQ(train(other, 2).params.size(), saved.params.size());  // and trains on
  }
  // One process on the four ranks' batches, from the checkpoint: the uninterrupted run, up to the
  // order of the sums.
  Job one;
  one.world = 4;
  one.one_process = true;
  one.stage = 0;
  one.load = first.save;
  one.from = 6;
  expect_close(train(one, 4), want, 1e-5, "4 more steps in one process");
}

// What cannot work at stage 3 is refused at prepare, on every rank alike, before any collective of
// the step: LBFGS, an optimizer prepared before its model, PowerSGD.
TEST(Stage3, RefusesLbfgsAnOptimizerBeforeItsModelAndPowerSgd) {
  const std::string lbfgs = stage3_refusal([](xlaunch::Accelerator& acc) {
    Net net;
    acc.prepare(net);
    torch::optim::LBFGS opt(net->parameters(), torch::optim::LBFGSOptions(1));
    acc.prepare(opt);
  });
  EXPECT_NE(lbfgs.find("LBFGS cannot be sharded"), std::string::npos) << lbfgs;
  const std::string before = stage3_refusal([](xlaunch::Accelerator& acc) {
    Net net;
    torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1));
    acc.prepare(opt);
    acc.prepare(net);
  });
  EXPECT_NE(before.find("prepare the model before the optimizer"), std::string::npos) << before;
  const std::string powersgd = stage3_refusal(
      [](xlaunch::Accelerator& acc) {
        Net net;
        acc.prepare(net);
      },
      "powersgd");
  EXPECT_NE(powersgd.find("cannot be used with ddp.zero_stage 3"), std::string::npos) << powersgd;
}

// A model where nothing is a unit trains (everything in the root) and says so once.
TEST(Stage3, AModelWithoutUnitsWarnsOnceAndTrains) {
  testing::internal::CaptureStderr();
  run_ranks(2, [&](std::shared_ptr<xlaunch::InProcessCommunicator> c) {
    xlaunch::AcceleratorOptions o;
    o.cpu = true;
    o.ddp.zero_stage = 3;
    xlaunch::Accelerator acc(o, c);
    Mlp mlp;
    auto model = acc.prepare(mlp);
    torch::optim::SGD sgd(mlp->parameters(), torch::optim::SGDOptions(0.1));
    auto& opt = acc.prepare(sgd);
    const Batch b = mlp_batch(c->rank(), 0);
    acc.backward(loss_of(model(b.x), b.y));
    opt.step();
  });
  const std::string err = testing::internal::GetCapturedStderr();
  const std::string line = "ddp.zero_stage 3 found no unit in the model";
  ASSERT_NE(err.find(line), std::string::npos) << err;
  EXPECT_EQ(err.find(line, err.find(line) + 1), std::string::npos) << "once, from rank 0: " << err;
  EXPECT_NE(err.find("xlaunch::FullyShard<Block>"), std::string::npos) << err;
}

// The parameters outside the units are gathered by the prepared model's call: a forward around it
// fails, naming the unit and the fix, instead of computing with zeros.
TEST(Stage3, AForwardAroundThePreparedModelIsRefused) {
  std::string what;
  run_ranks(2, [&](std::shared_ptr<xlaunch::InProcessCommunicator> c) {
    xlaunch::AcceleratorOptions o;
    o.cpu = true;
    o.ddp.zero_stage = 3;
    xlaunch::Accelerator acc(o, c);
    Net net;
    auto model = acc.prepare(net);
    const at::Tensor t = tokens(c->rank(), 0).narrow(1, 0, kSeq);
    EXPECT_EQ(model(t).size(2), kVocab);  // through the prepared model: fine
    std::vector<at::Tensor> trainable;
    for (const auto& p : net->parameters())
      if (p.requires_grad()) trainable.push_back(p);
    torch::optim::SGD sgd(trainable, torch::optim::SGDOptions(0.1));
    auto& opt = acc.prepare(sgd);
    opt.step();  // frees every unit, the root too
    try {
      net->forward(t);
    } catch (const xlaunch::UsageError& e) {
      if (c->rank() == 0) what = e.what();
    }
  });
  EXPECT_NE(what.find("unit 'blocks.0' of a model prepared at ddp.zero_stage 3 was called outside"), std::string::npos)
      << what;
  EXPECT_NE(what.find("model(x), not net->forward(x)"), std::string::npos) << what;
}
