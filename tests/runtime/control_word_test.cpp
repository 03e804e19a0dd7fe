// The reducer's agreement bit (Reducer::set_control_bit / control_raised_at) with ranks as threads
// of one process: under every communication hook, a bit raised by one rank is observed by every
// rank at the same synced backward and not before, a bit cleared before a synced backward is never
// observed, backwards without sync carry nothing, and the gradients are bit for bit those of a run
// where no rank raised anything. And the control word's two reading rules on their own.
#include <gtest/gtest.h>

#include <ATen/Parallel.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>

#include <string>
#include <vector>

#include "ddp/control_word.h"
#include "inprocess_ranks.h"
#include "models.h"
#include "xlaunch/error.h"
#include "xlaunch/extend/communicator.h"
#include "xlaunch/reducer.h"

using xlaunch::ControlWord;
using xlaunch::InProcessCommunicator;
using xlaunch::Reducer;
using xlaunch::ReducerOptions;
using namespace xlaunch::test;

TEST(ControlWord, OnTheHostAnAverageIsReadAtTheBackwardThatCarriedIt) {
  at::Tensor element = at::zeros({1});
  ControlWord control(element, /*deferred=*/false);
  control.set_bit(true);
  control.write();
  EXPECT_EQ(element.item<float>(), 1.0f);
  element.fill_(0.0f);  // what the average of ranks that all wrote 0 leaves
  control.read(1);
  EXPECT_EQ(control.raised_at(), -1);
  element.fill_(1.0f / 3);  // one rank of 3 raised its bit
  control.read(2);
  EXPECT_EQ(control.raised_at(), 2);
  element.fill_(0.0f);
  control.read(3);
  EXPECT_EQ(control.raised_at(), 2) << "the first observation stays";
  control.set_bit(false);
  control.write();
  EXPECT_EQ(element.item<float>(), 0.0f);
}

TEST(ControlWord, DeferredAnAverageIsReadOneSyncedBackwardLater) {
  // A device's rule, on a host tensor: each read copies the average and reads the previous copy.
  at::Tensor element = at::zeros({1});
  ControlWord control(element, /*deferred=*/true);
  element.fill_(0.0f);
  control.read(1);
  element.fill_(0.5f);  // raised, carried by synced backward 2
  control.read(2);
  EXPECT_EQ(control.raised_at(), -1) << "a device average is not read at the backward that carried it";
  element.fill_(0.0f);  // by then cleared again: the copy of backward 2 still holds the raise
  control.read(3);
  EXPECT_EQ(control.raised_at(), 3);
}

namespace {

// One run: `world` ranks reduce the test MLP's gradients through `hook`; backward k is synced iff
// sync[k]. Rank raise_rank sets its bit before backward raise_before and clears it before backward
// clear_before (-1: never).
struct Script {
  std::string hook = "none";
  int world = 3;
  std::vector<bool> sync;
  int raise_rank = -1;
  int raise_before = -1;
  int clear_before = -1;
  bool unused_layer = false;  // the MLP has a layer that takes no part in the loss
  bool find_unused = false;
};

// What one rank saw after each backward: its gradients (flattened) and control_raised_at().
struct Seen {
  std::vector<at::Tensor> grads;
  std::vector<int64_t> raised;
  std::string layout;
};

std::vector<Seen> run(const Script& script) {
  at::set_num_threads(1);  // the same bits on every run
  torch::manual_seed(17);
  Mlp init(20, 32, 10, script.unused_layer);
  std::vector<Seen> seen(script.world);
  run_ranks(script.world, [&](std::shared_ptr<InProcessCommunicator> c) {
    const int rank = c->rank();
    Mlp mlp(20, 32, 10, script.unused_layer);
    copy_state(*mlp, *init);
    std::vector<at::Tensor> params;
    std::vector<std::string> names;
    for (const auto& item : mlp->named_parameters()) {
      params.push_back(item.value());
      names.push_back(item.key());
    }
    ReducerOptions o;
    o.comm_hook = script.hook;
    o.first_bucket_bytes = 64;
    o.bucket_cap_mb = 0.002;  // several buckets: the control element rides on the last one only
    o.powersgd_rank = 1;
    o.powersgd_start_step = 1;  // the first synced backward exact, the others compressed
    o.find_unused_parameters = script.find_unused;
    Reducer reducer(params, names, [c](const at::Device&) { return c; }, o);
    seen[rank].layout = reducer.layout();
    for (size_t k = 0; k < script.sync.size(); ++k) {
      if (rank == script.raise_rank && static_cast<int>(k) == script.raise_before) reducer.set_control_bit(true);
      if (rank == script.raise_rank && static_cast<int>(k) == script.clear_before) reducer.set_control_bit(false);
      reducer.prepare_for_backward(script.sync[k]);
      const auto b = mlp_batch(rank, static_cast<int>(k));
      loss_of(mlp(b.x), b.y).backward();
      reducer.finalize_backward();
      std::vector<at::Tensor> flat;
      for (const auto& p : params) flat.push_back(p.grad().detach().reshape(-1).clone());
      seen[rank].grads.push_back(at::cat(flat));
      seen[rank].raised.push_back(reducer.control_raised_at());
      if (script.sync[k])
        for (auto& p : params) p.mutable_grad().reset();  // as zero_grad(set_to_none) after the step
    }
  });
  return seen;
}

// control_raised_at() after each backward of `script`, as the header promises on the CPU: from the
// first synced backward at or after the raise, and before the clear, on: the synced count there.
std::vector<int64_t> expected_raised(const Script& script) {
  std::vector<int64_t> out(script.sync.size(), -1);
  int64_t synced = 0;
  bool carried = false;
  for (size_t k = 0; k < script.sync.size(); ++k) {
    synced += script.sync[k] ? 1 : 0;
    const bool bit_on = script.raise_rank >= 0 && static_cast<int>(k) >= script.raise_before &&
                        (script.clear_before < 0 || static_cast<int>(k) < script.clear_before);
    if (!carried && bit_on && script.sync[k]) {
      carried = true;
      for (size_t j = k; j < out.size(); ++j) out[j] = synced;
    }
  }
  return out;
}

// The script's run against the same run where no rank raises its bit: the same gradients, bit for
// bit, and every rank observing what expected_raised says.
void check(const Script& script) {
  Script quiet = script;
  quiet.raise_rank = -1;
  const auto with_bit = run(script);
  const auto without = run(quiet);
  const auto want = expected_raised(script);
  for (int r = 0; r < script.world; ++r) {
    EXPECT_EQ(with_bit[r].raised, want) << script.hook << " rank " << r;
    EXPECT_EQ(without[r].raised, std::vector<int64_t>(script.sync.size(), -1)) << script.hook << " rank " << r;
    EXPECT_EQ(with_bit[r].layout, with_bit[0].layout);
    for (size_t k = 0; k < script.sync.size(); ++k)
      EXPECT_TRUE(with_bit[r].grads[k].equal(without[r].grads[k]))
          << script.hook << " rank " << r << " backward " << k << ": the control bit changed a gradient";
  }
}

const std::vector<bool> kAccumulating = {true, false, true, true, false, true, true};

}  // namespace

class ControlBit : public ::testing::TestWithParam<std::string> {};

// Raised before a micro-step without sync: that one carries nothing; the next synced one does.
TEST_P(ControlBit, RaisedByOneRankIsObservedByAllAtTheSameSyncedBackward) {
  Script s;
  s.hook = GetParam();
  s.sync = kAccumulating;
  s.raise_rank = 2;
  s.raise_before = 4;
  const auto want = expected_raised(s);
  ASSERT_EQ(want[4], -1);
  ASSERT_EQ(want[5], 4);  // synced backwards 0, 2, 3, 5
  check(s);
}

TEST_P(ControlBit, RaisedBeforeTheFirstBackwardIsObservedAtTheFirst) {
  Script s;
  s.hook = GetParam();
  s.sync = kAccumulating;
  s.raise_rank = 0;
  s.raise_before = 0;
  check(s);
}

TEST_P(ControlBit, ClearedBeforeAnySyncedBackwardIsNeverObserved) {
  Script s;
  s.hook = GetParam();
  s.sync = kAccumulating;
  s.raise_rank = 1;
  s.raise_before = 1;  // set during a micro-step without sync ...
  s.clear_before = 2;  // ... and cleared before the next synced one
  ASSERT_EQ(expected_raised(s), std::vector<int64_t>(s.sync.size(), -1));
  check(s);
}

TEST_P(ControlBit, ObservedOnceItStaysWhenTheBitIsCleared) {
  Script s;
  s.hook = GetParam();
  s.sync = kAccumulating;
  s.raise_rank = 1;
  s.raise_before = 2;
  s.clear_before = 3;
  check(s);
}

TEST_P(ControlBit, AWorldOfOneObservesItsOwnBit) {
  Script s;
  s.hook = GetParam();
  s.world = 1;
  s.sync = kAccumulating;
  s.raise_rank = 0;
  s.raise_before = 3;
  check(s);
}

INSTANTIATE_TEST_SUITE_P(Hooks, ControlBit, ::testing::Values("none", "fp16", "bf16", "powersgd"));

TEST(ControlBitReducer, TheControlElementIsNoParameter) {
  // An unused layer: the reducer reports exactly its two parameters, under find_unused_parameters the
  // bit still travels, and only the last bucket's layout line names the control element.
  Script s;
  s.sync = {true, true};
  s.raise_rank = 1;
  s.raise_before = 1;
  s.unused_layer = true;
  s.find_unused = true;
  check(s);
  const std::string layout = run(s)[0].layout;
  const size_t last_line = layout.rfind("bucket ");
  EXPECT_EQ(layout.find("+ control"), layout.find("+ control", last_line)) << layout;
  EXPECT_NE(layout.find("+ control", last_line), std::string::npos) << layout;

  s.find_unused = false;
  s.sync = {true};
  try {
    run(s);
    FAIL() << "an unused parameter should be reported";
  } catch (const xlaunch::UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(" 2 parameter(s) "), std::string::npos) << what;
    EXPECT_NE(what.find("'unused.weight', 'unused.bias'"), std::string::npos) << what;
  }
}

TEST(ControlBitReducer, SixteenBitGradientsCarryTheBitToo) {
  // bf16 parameters: the last bucket is bf16, and 1/3 of a raised bit survives it.
  at::set_num_threads(1);
  std::vector<int64_t> raised(3);
  run_ranks(3, [&](std::shared_ptr<InProcessCommunicator> c) {
    torch::nn::Linear lin(8, 4);
    lin->to(at::kBFloat16);
    std::vector<at::Tensor> params = lin->parameters();
    Reducer reducer(params, {"weight", "bias"}, [c](const at::Device&) { return c; }, ReducerOptions{});
    if (c->rank() == 1) reducer.set_control_bit(true);
    reducer.prepare_for_backward(true);
    lin(at::ones({2, 8}, at::kBFloat16)).sum().backward();
    reducer.finalize_backward();
    raised[c->rank()] = reducer.control_raised_at();
  });
  EXPECT_EQ(raised, std::vector<int64_t>(3, 1));
}
