// The pure parts of `xlaunch merge-weights` (merge_weights.h): which files of a checkpoint are
// models, and the names their safetensors take in OUT. merge_weights_test.py runs the whole command.
#include <gtest/gtest.h>

#include "merge_weights.h"

using namespace xlaunch::merge;

TEST(MergeWeightsPlan, ModelsAreTheRank0ModelFilesByIndex) {
  EXPECT_EQ(model_indices({"MANIFEST", "rank0/model_10.pt", "rank0/optimizer_0.pt", "rank0/model_2.pt",
                           "rank0/model_0.pt", "rng/rank_0.pt", "rank1/model_1.pt", "rank0/model_01.pt",
                           "rank0/model_x.pt", "ddp/model_0_rank_0.pt"}),
            (std::vector<size_t>{0, 2, 10}));
  EXPECT_TRUE(model_indices({"MANIFEST", "metadata.txt"}).empty());
}

TEST(MergeWeightsPlan, ModelZeroKeepsTheNamesTheOthersTakeTheirStem) {
  EXPECT_EQ(merged_stem(0), "model");
  EXPECT_EQ(merged_stem(3), "model_3");
  EXPECT_EQ(merged_name(0, "model.safetensors"), "model.safetensors");
  EXPECT_EQ(merged_name(1, "model.safetensors"), "model_1.safetensors");
  EXPECT_EQ(merged_name(2, "model-00001-of-00003.safetensors"), "model_2-00001-of-00003.safetensors");
  EXPECT_EQ(merged_name(2, "model.safetensors.index.json"), "model_2.safetensors.index.json");
}

TEST(MergeWeightsPlan, TheFilesAMergeWouldReplace) {
  for (const char* name : {"model.safetensors", "model_1.safetensors", "model.safetensors.index.json",
                           "model_12.safetensors.index.json", "model-00001-of-00002.safetensors",
                           "model_3-00002-of-00004.safetensors"})
    EXPECT_TRUE(is_merged_model_file(name)) << name;
  for (const char* name : {"config.json", "tokenizer.json", "model.bin", "model_.safetensors", "my_model.safetensors",
                           "model-1-of-2.safetensors", ".xlaunch-merge-abc123", "model.safetensors.tmp"})
    EXPECT_FALSE(is_merged_model_file(name)) << name;
}
