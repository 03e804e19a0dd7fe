// The table of ZeRO stages (ddp/stage_strategy.h): each row makes its own stage's strategy, an
// unknown stage is refused naming the setting and the stages there are, and each stage answers
// the reducer's questions as the stage is documented (xlaunch/reducer.h).
#include <gtest/gtest.h>

#include <iterator>
#include <string>

#include "ddp/stage_strategy.h"
#include "xlaunch/error.h"
#include "xlaunch/zero_stages.h"

namespace xlaunch {
namespace {

// What a strategy is made over: a reducer's members, here empty (no parameters, no buckets).
struct Parts {
  ReducerOptions options;
  std::vector<at::Tensor> params;
  std::vector<std::vector<size_t>> plan;
  std::vector<ReducerBucket> buckets;

  std::unique_ptr<StageStrategy> make(int stage) {
    options.zero_stage = stage;
    return make_stage_strategy(StageContext{options, params, plan, buckets});
  }
};

std::string refusal(int stage) {
  try {
    Parts().make(stage);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "no error";
}

TEST(ZeroStages, EachRowMakesItsStage) {
  ASSERT_EQ(std::size(kZeroStages), 4u);
  for (const ZeroStageInfo& row : kZeroStages) {
    Parts parts;
    EXPECT_EQ(parts.make(row.stage)->stage(), row.stage) << row.meaning;
  }
}

// The launcher and the config ask the same table (xlaunch/zero_stages.h, torch-free) what a stage
// number means.
TEST(ZeroStages, TheSharedTableSaysWhatEachStageShards) {
  for (int stage : {0, 1, 2, 3}) EXPECT_TRUE(is_zero_stage(stage)) << stage;
  for (int stage : {-1, 4}) EXPECT_FALSE(is_zero_stage(stage)) << stage;
  EXPECT_FALSE(shards_optimizer_state(0));
  EXPECT_TRUE(shards_optimizer_state(1));
  EXPECT_TRUE(shards_optimizer_state(2));
  EXPECT_FALSE(shards_gradients(1));
  EXPECT_TRUE(shards_gradients(2));
  EXPECT_EQ(static_cast<int>(ZeroStage::kGradients), 2);
  EXPECT_TRUE(shards_parameters(3));
  EXPECT_FALSE(shards_parameters(2));
  EXPECT_EQ(static_cast<int>(ZeroStage::kParameters), 3);
  EXPECT_EQ(zero_stage_choices(), "0, 1, 2 or 3");
}

TEST(ZeroStages, AnUnknownStageIsRefusedNamingTheSettingAndTheStages) {
  const std::string expected = "set ddp.zero_stage to 0 (no sharding), 1 (optimizer state sharded), 2 "
                               "(optimizer state and gradients sharded) or 3 (optimizer state, gradients and "
                               "parameters sharded)";
  EXPECT_EQ(refusal(4), "zero_stage 4 is not built: " + expected);
  EXPECT_EQ(refusal(-1), "zero_stage -1 is not built: " + expected);
}

TEST(ZeroStages, WhatEachStageDoes) {
  Parts parts;
  const auto s0 = parts.make(0);
  EXPECT_TRUE(s0->slots());
  EXPECT_TRUE(s0->in_place_allowed());
  EXPECT_FALSE(s0->alone_from_cap());
  const auto s1 = parts.make(1);
  EXPECT_TRUE(s1->slots());
  EXPECT_FALSE(s1->in_place_allowed());  // its optimizer steps views of the bucket
  EXPECT_FALSE(s1->alone_from_cap());
  const auto s2 = parts.make(2);
  EXPECT_FALSE(s2->slots());  // gradients are staged as their bucket starts
  EXPECT_FALSE(s2->in_place_allowed());
  EXPECT_TRUE(s2->alone_from_cap());
}

TEST(ZeroStages, StageTwoRefusesAHookThatCannotReduceScatter) {
  Parts parts;
  parts.options.comm_hook = "powersgd";
  const auto hook = make_comm_hook(parts.options);
  EXPECT_NO_THROW(parts.make(1)->check_hook(*hook));
  try {
    parts.make(2)->check_hook(*hook);
    ADD_FAILURE() << "stage 2 took the powersgd hook";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("ddp.comm_hook powersgd cannot be used with ddp.zero_stage 2"),
              std::string::npos)
        << e.what();
  }
  parts.options.comm_hook = "none";
  EXPECT_NO_THROW(parts.make(2)->check_hook(*make_comm_hook(parts.options)));
}

}  // namespace
}  // namespace xlaunch
