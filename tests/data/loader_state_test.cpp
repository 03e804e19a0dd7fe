// Loader positions in a checkpoint's trainer_state.txt keys (state/loader_state.h): saved on one
// layout, restored on another, and checkpoints written before the keys existed.
#include <gtest/gtest.h>

#include <sstream>

#include "state/loader_state.h"
#include "test_datasets.h"

namespace {

using namespace xlaunch::test;
using xlaunch::Loader;
using xlaunch::checkpoint::KeyValues;

std::vector<std::unique_ptr<Loader>> one_loader(int64_t n, int64_t b, int rank, int world) {
  std::vector<std::unique_ptr<Loader>> out;
  out.push_back(std::make_unique<Loader>(IndexDataset(n), options(b, 0, rank, world)));
  return out;
}

// Restores `state` into rank 0 of a world x b job; returns its log lines.
std::string restore(std::vector<std::unique_ptr<Loader>>& loaders, int world, int64_t saved_world,
                    const KeyValues& state) {
  std::string log;
  xlaunch::checkpoint::restore_loader_positions(loaders, world, saved_world, state,
                                                [&](const std::string& line) { log += line + "\n"; });
  return log;
}

TEST(LoaderState, SavesTheSamplesReadAndRestoresThemOnAnotherWorldSize) {
  auto saved = one_loader(6000, 8, 1, 4);  // 188 batches of 8 per rank
  run_epoch(*saved[0]);
  int64_t k = 0;
  for (auto& b : *saved[0]) {
    (void)b;
    if (++k == 60) break;
  }
  KeyValues state;
  std::ostringstream meta;
  xlaunch::checkpoint::save_loader_positions(saved, 4, state, meta);
  EXPECT_EQ(state.at("loader.0.epoch"), "1");
  EXPECT_EQ(state.at("loader.0.batch"), "60");
  EXPECT_EQ(state.at("loader.0.consumed"), "1920");
  EXPECT_EQ(state.at("loader.0.global_batch"), "32");
  EXPECT_EQ(state.at("loader.0.dataset_size"), "6000");
  EXPECT_EQ(meta.str(), "loader 0 epoch 1 next batch 60 of 188 consumed 1920 of 6000\n");

  auto three = one_loader(6000, 8, 0, 3);
  EXPECT_EQ(restore(three, 3, 4, state),
            "load_state: loader 0 was saved at sample 1920 of 6000 in epoch 1 by 4 processes; this job has 3: it "
            "continues with the 4080 samples not yet read\n");
  EXPECT_EQ(three[0]->position().epoch, 1);
  EXPECT_EQ(three[0]->position().consumed, 1920);

  auto same = one_loader(6000, 8, 2, 4);  // the same layout: silent, and a skip of 60 batches
  EXPECT_EQ(restore(same, 4, 4, state), "");
  EXPECT_EQ(same[0]->position().batch, 60);
  EXPECT_EQ(same[0]->position().consumed, 1920);
}

TEST(LoaderState, ACheckpointWithoutConsumedUsesItsGlobalBatch) {
  const KeyValues state{{"loader.0.epoch", "2"}, {"loader.0.batch", "5"}, {"loader.0.num_batches", "13"},
                        {"loader.0.global_batch", "16"}, {"loader.0.dataset_size", "100"}};
  auto three = one_loader(100, 5, 0, 3);
  EXPECT_EQ(restore(three, 3, 2, state),
            "load_state: loader 0 was saved at sample 80 of 100 in epoch 2 by 2 processes of batch 8; this job "
            "has 3 of batch 5: it continues with the 20 samples not yet read\n");
  EXPECT_EQ(three[0]->position().consumed, 80);
}

TEST(LoaderState, AnOlderCheckpointWithoutTheGlobalBatchRestartsTheEpochOnAnotherWorldSize) {
  const KeyValues state{{"loader.0.epoch", "2"}, {"loader.0.batch", "5"}, {"loader.0.num_batches", "7"}};
  auto other = one_loader(100, 8, 0, 3);  // 5 batches per epoch
  EXPECT_NE(restore(other, 3, 2, state).find("epoch 2 restarts from its first batch"), std::string::npos);
  EXPECT_EQ(other[0]->position().epoch, 2);
  EXPECT_EQ(other[0]->position().consumed, 0);
  auto same = one_loader(100, 8, 1, 2);  // 7 batches per epoch: as saved
  EXPECT_EQ(restore(same, 2, 2, state), "");
  EXPECT_EQ(same[0]->position().batch, 5);
  EXPECT_EQ(same[0]->position().consumed, 80);
}

TEST(LoaderState, AnotherDatasetSizeRestartsTheEpochSayingWhy) {
  const KeyValues state{{"loader.0.epoch", "1"}, {"loader.0.batch", "2"}, {"loader.0.num_batches", "7"},
                        {"loader.0.consumed", "32"}, {"loader.0.global_batch", "16"}, {"loader.0.dataset_size", "100"}};
  auto loaders = one_loader(90, 8, 0, 2);
  EXPECT_EQ(restore(loaders, 2, 2, state),
            "load_state: loader 0 was saved at sample 32 of 100 in epoch 1; this job's dataset has 90 samples, so "
            "the epoch's order is another one: epoch 1 restarts from its first batch\n");
  EXPECT_EQ(loaders[0]->position().consumed, 0);
}

}  // namespace
