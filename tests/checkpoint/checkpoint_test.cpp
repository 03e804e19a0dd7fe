// One process: Loader positions, and the checkpoint directory's atomic writing and verification.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "../data/test_datasets.h"
#include "state/checkpoint_dir.h"
#include "xlaunch/error.h"
#include "xlaunch/loader.h"

namespace fs = std::filesystem;
using xlaunch::Loader;
using xlaunch::LoaderPosition;

namespace {

Loader make_loader() {
  xlaunch::LoaderOptions o;
  o.batch_size = 4;  // 10 samples: batches of 4, 4, 2
  o.num_workers = 2;
  o.seed = 3;
  return Loader(xlaunch::test::IndexDataset(10), o);
}

std::vector<int64_t> targets_of(Loader& loader) {
  std::vector<int64_t> out;
  for (auto& b : loader)
    for (int64_t i = 0; i < b.size(); ++i) out.push_back(b.target[i].item<int64_t>());
  return out;
}

// A directory of this process's own, removed when the tests end. (With rm: libtorch.so exports a
// std::filesystem::remove_all that crashes here.)
struct ScratchRoot {
  fs::path path = fs::temp_directory_path() / ("xlaunch_ckpt_test_" + std::to_string(getpid()));
  ~ScratchRoot() { std::system(("rm -rf '" + path.string() + "'").c_str()); }
};

fs::path scratch(const std::string& name) {
  static ScratchRoot root;
  fs::create_directories(root.path);
  return root.path / name;
}

}  // namespace

TEST(LoaderPosition, CountsBatchesHandedOverAndMovesToTheNextEpochAtTheEnd) {
  Loader loader = make_loader();
  EXPECT_EQ(loader.position().epoch, 0);
  EXPECT_EQ(loader.position().batch, 0);
  int64_t seen = 0;
  for (auto& b : loader) {
    ++seen;
    const LoaderPosition p = loader.position();
    if (b.index < 2) {
      EXPECT_EQ(p.epoch, 0);
      EXPECT_EQ(p.batch, seen);
    } else {  // the last batch handed over: the next comes from epoch 1
      EXPECT_EQ(p.epoch, 1);
      EXPECT_EQ(p.batch, 0);
    }
  }
  EXPECT_EQ(seen, 3);
}

TEST(LoaderPosition, SetPositionResumesAtTheNextBatchOfThatEpoch) {
  Loader straight = make_loader();
  targets_of(straight);
  const std::vector<int64_t> epoch1 = targets_of(straight);

  Loader first = make_loader();
  targets_of(first);
  auto it = first.begin();  // epoch 1: take one batch, then stop
  const LoaderPosition saved = first.position();
  EXPECT_EQ(saved.epoch, 1);
  EXPECT_EQ(saved.batch, 1);

  Loader resumed = make_loader();
  resumed.set_position(saved);
  EXPECT_EQ(resumed.position().epoch, 1);
  EXPECT_EQ(resumed.position().batch, 1);
  const std::vector<int64_t> rest = targets_of(resumed);
  EXPECT_EQ(rest, std::vector<int64_t>(epoch1.begin() + 4, epoch1.end()));
  EXPECT_EQ(resumed.epoch(), 2);
}

TEST(CheckpointFiles, WritesAtomicallyAndReadsBackVerified) {
  const fs::path dir = scratch("a");
  xlaunch::checkpoint::write_atomically(dir.string(), {{"x.txt", "one"}, {"sub/y.bin", std::string("\0\1", 2)}});
  xlaunch::checkpoint::write_atomically(dir.string(), {{"x.txt", "two"}});
  EXPECT_FALSE(fs::exists(dir.string() + ".tmp"));
  EXPECT_FALSE(fs::exists(dir.string() + ".old"));
  bool fell_back = true;
  const auto files = xlaunch::checkpoint::read_verified(dir.string(), &fell_back);
  EXPECT_FALSE(fell_back);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files.at("x.txt"), "two");
}

TEST(CheckpointFiles, FallsBackToOldWhenTheDirectoryIsMissing) {
  const fs::path dir = scratch("b");
  xlaunch::checkpoint::write_atomically(dir.string(), {{"x.txt", "one"}});
  fs::rename(dir, dir.string() + ".old");
  bool fell_back = false;
  EXPECT_EQ(xlaunch::checkpoint::read_verified(dir.string(), &fell_back).at("x.txt"), "one");
  EXPECT_TRUE(fell_back);
}

TEST(CheckpointFiles, RefusesCorruptMissingAndForeignDirectories) {
  const fs::path dir = scratch("c");
  xlaunch::checkpoint::write_atomically(dir.string(), {{"x.txt", "one"}});
  std::ofstream(dir / "x.txt") << "ONE";
  try {
    xlaunch::checkpoint::read_verified(dir.string());
    FAIL() << "a corrupt file was accepted";
  } catch (const xlaunch::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("is corrupt: " + (dir / "x.txt").string()), std::string::npos) << e.what();
  }
  EXPECT_THROW(xlaunch::checkpoint::read_verified((dir / "nothing").string()), xlaunch::UsageError);
  const fs::path foreign = scratch("d");
  fs::create_directories(foreign);
  std::ofstream(foreign / "notes.txt") << "mine";
  EXPECT_THROW(xlaunch::checkpoint::write_atomically(foreign.string(), {{"x.txt", "one"}}), xlaunch::UsageError);
  EXPECT_TRUE(fs::exists(foreign / "notes.txt"));
}
