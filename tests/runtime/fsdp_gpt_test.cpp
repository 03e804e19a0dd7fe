// ZeRO stage 3 on the GPT example's own model (examples/gpt_model.h: FullyShard blocks of causal
// attention and an MLP, embeddings and the tied output projection in the root), trained as
// examples/train_gpt.cpp trains it (AdamW with decay on matrices only, the cosine schedule with
// warmup, clip_grad_norm_), with ranks as threads: on 1 to 4 ranks against one process training on
// every rank's batch at once, within 1e-5 (relative) after 50 steps, with and without gradient
// accumulation (the qkv biases frozen: see freeze_key_bias);
// activation checkpointing and a wrap policy change no bit of it. fsdp_mpi_test.cpp
// runs the same model through the real transports.
#include <gtest/gtest.h>

#include <ATen/ops/cat.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "../../examples/gpt_model.h"
#include "inprocess_ranks.h"
#include "models.h"
#include "xlaunch/accelerator.h"
#include "xlaunch/lr_scheduler.h"

// Named, not anonymous: the group's unity build shares one anonymous namespace with fsdp_test.cpp.
namespace fsdp_gpt {

using xlaunch::test::copy_state;
using xlaunch::test::rel_err;
using xlaunch::test::run_ranks;

constexpr int64_t kDim = 16, kLayers = 3, kHeads = 2, kSeq = 8, kBatch = 3;

struct Job {
  int world = 2;
  int stage = 3;
  int accumulation = 1;
  bool recompute = false;     // fsdp.activation_checkpointing
  std::string wrap = "auto";  // fsdp.wrap
  bool one_process = false;   // one rank training on every rank's batch of `world`
};

// Rank r's bytes at micro-step m: kBatch sequences of kSeq + 1 (inputs and next-byte targets).
at::Tensor bytes(int rank, int micro) {
  auto gen = at::detail::createCPUGenerator(500 + 37 * micro + rank);
  return at::randint(0, 256, {kBatch, kSeq + 1}, gen, at::kLong);
}

using State = std::vector<std::pair<std::string, at::Tensor>>;

// Freezes each block's qkv bias. The keys' part of it has no gradient in exact arithmetic (a bias
// added to every key adds the same number to all of a query's scores, and softmax ignores that), so
// all that reaches it is rounding noise, which AdamW divides by its own root mean square into steps
// of the whole learning rate: any other order of summation (flat buckets, another batch split)
// moves it by lr-sized steps, and the rest of the model after it. (Frozen parameters stay whole at
// stage 3, as the stage-3 test model's frozen layer does.)
void freeze_key_bias(xlaunch::examples::GptImpl& net) {
  for (auto& block : net.blocks) block->qkv->bias.requires_grad_(false);
}

// Rank 0's whole model after `steps` optimizer steps.
State train(const Job& s, int steps = 50) {
  torch::manual_seed(5);
  xlaunch::examples::Gpt init(kDim, kLayers, kHeads, kSeq);
  State out;
  std::mutex mu;
  const int ranks = s.one_process ? 1 : s.world;
  run_ranks(ranks, [&](std::shared_ptr<xlaunch::InProcessCommunicator> c) {
    xlaunch::AcceleratorOptions o;
    o.cpu = true;
    o.ddp.zero_stage = s.stage;
    o.ddp.fsdp_activation_checkpointing = s.recompute;
    o.ddp.fsdp_wrap = s.wrap;
    o.gradient_accumulation_steps = s.accumulation;
    xlaunch::Accelerator acc(o, c);
    xlaunch::examples::Gpt net(kDim, kLayers, kHeads, kSeq);
    copy_state(*net, *init);
    freeze_key_bias(*net);
    auto model = acc.prepare(net);
    std::vector<at::Tensor> decay, no_decay;
    for (const auto& p : net->named_parameters())
      if (p.value().requires_grad()) (p.value().dim() >= 2 && p.key() != "pos" ? decay : no_decay).push_back(p.value());
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(
                                   torch::optim::AdamWOptions(3e-3).betas({0.9, 0.95}).weight_decay(0.1)));
    groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(
                                      torch::optim::AdamWOptions(3e-3).betas({0.9, 0.95}).weight_decay(0)));
    torch::optim::AdamW adamw(groups, torch::optim::AdamWOptions(3e-3));
    auto& opt = acc.prepare(adamw);
    xlaunch::ScheduleOptions schedule;
    schedule.total_steps = steps;
    schedule.warmup_steps = 5;
    auto cosine = xlaunch::get_scheduler("cosine", adamw, schedule);
    auto& sched = acc.prepare(*cosine);
    for (int micro = 0; micro < steps * s.accumulation; ++micro) {
      acc.accumulate();
      at::Tensor t;
      if (s.one_process) {
        std::vector<at::Tensor> all;
        for (int r = 0; r < s.world; ++r) all.push_back(bytes(r, micro));
        t = at::cat(all);
      } else {
        t = bytes(c->rank(), micro);
      }
      const at::Tensor logits = model(t.narrow(1, 0, kSeq));
      acc.backward(torch::nn::functional::cross_entropy(logits.reshape({-1, 256}), t.narrow(1, 1, kSeq).reshape({-1})));
      if (acc.sync_gradients()) acc.clip_grad_norm_(0.5);
      opt.step();
      sched.step();
      opt.zero_grad();
    }
    const auto state = acc.get_state_dict(model);  // collective at stage 3
    if (c->rank() != 0) return;
    std::lock_guard<std::mutex> lk(mu);
    for (const auto& [name, tensor] : state) out.emplace_back(name, tensor);
  });
  return out;
}

void expect_close(const State& got, const State& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  ASSERT_FALSE(got.empty()) << what;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].first, want[i].first) << what;
    const double e = rel_err(got[i].second, want[i].second);
    worst = std::max(worst, e);
    EXPECT_LE(e, tol) << what << ": " << got[i].first;
  }
  std::printf("fsdp_gpt %s: largest relative error %.3g\n", what.c_str(), worst);
}

class GptStage3 : public ::testing::TestWithParam<int> {};

TEST_P(GptStage3, MatchesOneProcess) {
  for (const int accumulation : {1, 2}) {
    Job s;
    s.world = GetParam();
    s.accumulation = accumulation;
    Job one = s;
    one.stage = 0;
    one.one_process = true;
    const State want = train(one);
    expect_close(train(s), want, 1e-5, "accumulation " + std::to_string(accumulation));
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, GptStage3, ::testing::Values(1, 2, 3, 4));

// The same run, every block recomputed in its backward, or cut by type: the same bits.
TEST(GptStage3Variants, CheckpointingAndWrapPolicyChangeNoBit) {
  Job s;
  s.world = 3;
  const State base = train(s, 20);
  Job recompute = s;
  recompute.recompute = true;
  expect_close(train(recompute, 20), base, 0, "fsdp.activation_checkpointing");
  Job typed = s;
  typed.wrap = "type:xlaunch::examples::Block";
  expect_close(train(typed, 20), base, 0, "fsdp.wrap type:xlaunch::examples::Block");
}

}  // namespace fsdp_gpt
