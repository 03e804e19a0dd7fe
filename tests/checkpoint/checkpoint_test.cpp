// One process: Loader positions, and the checkpoint directory's atomic writing and verification.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "../data/test_datasets.h"
#include "state/checkpoint_dir.h"
#include "state/named_checkpoints.h"
#include "xlaunch/error.h"
#include "xlaunch/loader.h"
#include "usage_error.h"

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

// One save into a directory at a time: a second one (another job, or this job while its
// background save is not complete) is refused before it removes or writes anything, and the
// lock goes with the first, committed or not.
TEST(CheckpointFiles, ASecondSaveIntoTheSameDirectoryIsRefusedWhileTheFirstWrites) {
  using xlaunch::checkpoint::PendingCheckpoint;
  const fs::path dir = scratch("locked");
  const fs::path lock = dir.parent_path() / ".locked.lock";
  {
    PendingCheckpoint first(dir.string());
    first.write("x.txt", "one");
    EXPECT_TRUE(fs::exists(lock));
    try {
      PendingCheckpoint second(dir.string());
      ADD_FAILURE() << "a second save into the same directory was not refused";
    } catch (const xlaunch::UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("another save is writing " + dir.string()), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("wait_for_checkpoint"), std::string::npos) << e.what();
    }
    EXPECT_TRUE(fs::exists(first.tmp() + "/x.txt")) << "the refused save removed the first one's temporary";
    first.commit();
  }
  EXPECT_FALSE(fs::exists(lock));
  EXPECT_EQ(xlaunch::checkpoint::read_verified(dir.string()).at("x.txt"), "one");
  { PendingCheckpoint abandoned(dir.string()); }  // destroyed without commit: its lock goes too
  EXPECT_FALSE(fs::exists(lock));
  xlaunch::checkpoint::write_atomically(dir.string(), {{"x.txt", "two"}});
  EXPECT_EQ(xlaunch::checkpoint::read_verified(dir.string()).at("x.txt"), "two");
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

// Issue 16: links someone planted beside the checkpoint are not written through, and another
// user's checkpoint directory is refused (played by root with chown; skipped as another user).
namespace {

std::string text_of(const fs::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

TEST(CheckpointSecurity, PlantedLinksAndStaleTemporariesAreNotFollowed) {
  const fs::path dir = scratch("e"), victim = scratch("victim");
  std::ofstream(victim) << "precious";
  fs::create_symlink(victim, dir.string() + ".tmp");  // the name older versions wrote to
  fs::create_directories(dir.string() + ".tmp-abc123");  // a killed save's temporary
  xlaunch::checkpoint::write_atomically(dir.string(), {{"x.txt", "one"}, {"sub/deeper/y.txt", "two"}});
  EXPECT_EQ(text_of(victim), "precious");
  EXPECT_FALSE(fs::exists(fs::symlink_status(dir.string() + ".tmp"))) << "our stale link was removed";
  EXPECT_FALSE(fs::exists(dir.string() + ".tmp-abc123")) << "our stale temporary was removed";
  EXPECT_EQ(xlaunch::checkpoint::read_verified(dir.string()).at("sub/deeper/y.txt"), "two");
  // The directory's mode is what mkdir gives under the umask, not mkdtemp's 0700.
  const mode_t mask = umask(022);
  umask(mask);
  EXPECT_EQ(static_cast<mode_t>(fs::status(dir).permissions()) & 0777, 0777 & ~mask);
}

TEST(CheckpointSecurity, ALinkAsTheCheckpointDirectoryIsRefusedForSavingButLoads) {
  const fs::path real = scratch("f"), link = scratch("f-link");
  xlaunch::checkpoint::write_atomically(real.string(), {{"x.txt", "one"}});
  fs::create_directory_symlink(real, link);
  const std::string e = xlaunch::test::usage_error_of([&] { xlaunch::checkpoint::write_atomically(link.string(), {{"x.txt", "2"}}); });
  EXPECT_NE(e.find("is a symbolic link"), std::string::npos) << e;
  EXPECT_EQ(xlaunch::checkpoint::read_verified(link.string()).at("x.txt"), "one");
}

TEST(CheckpointSecurity, AnotherUsersCheckpointIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "playing another user needs root (chown)";
  const fs::path dir = scratch("g");
  xlaunch::checkpoint::write_atomically(dir.string(), {{"x.txt", "one"}});
  ASSERT_EQ(chown(dir.c_str(), 65534, 65534), 0);
  std::string e = xlaunch::test::usage_error_of([&] { xlaunch::checkpoint::write_atomically(dir.string(), {{"x.txt", "2"}}); });
  EXPECT_NE(e.find("belongs to uid 65534"), std::string::npos) << e;
  e = xlaunch::test::usage_error_of([&] { xlaunch::checkpoint::read_verified(dir.string()); });
  EXPECT_NE(e.find("belongs to uid 65534"), std::string::npos) << e;
  EXPECT_EQ(text_of(dir / "x.txt"), "one");
  // A forged file in our own checkpoint: not read either.
  const fs::path mine = scratch("h");
  xlaunch::checkpoint::write_atomically(mine.string(), {{"x.txt", "one"}});
  ASSERT_EQ(chown((mine / "x.txt").c_str(), 65534, 65534), 0);
  e = xlaunch::test::usage_error_of([&] { xlaunch::checkpoint::read_verified(mine.string()); });
  EXPECT_NE(e.find("not a regular file of this user's"), std::string::npos) << e;
  // Another user's <dir>.old would be removed by the save: refused.
  const fs::path other = scratch("i");
  fs::create_directories(other.string() + ".old");
  ASSERT_EQ(chown((other.string() + ".old").c_str(), 65534, 65534), 0);
  e = xlaunch::test::usage_error_of([&] { xlaunch::checkpoint::write_atomically(other.string(), {{"x.txt", "2"}}); });
  EXPECT_NE(e.find("belongs to uid 65534"), std::string::npos) << e;
}

TEST(CheckpointSecurity, AParentEveryoneMayWriteIsRefusedUnlessSticky) {
  const fs::path parent = scratch("open");
  fs::create_directories(parent);
  fs::permissions(parent, fs::perms::all);
  const std::string e = xlaunch::test::usage_error_of([&] { xlaunch::checkpoint::write_atomically((parent / "c").string(), {{"x", "1"}}); });
  EXPECT_NE(e.find("not sticky"), std::string::npos) << e;
  fs::permissions(parent, fs::perms::all | fs::perms::sticky_bit);
  xlaunch::checkpoint::write_atomically((parent / "c").string(), {{"x", "1"}});
}

// ---- named checkpoints (named_checkpoints.h) ---------------------------------------------------

namespace {

void save_named(const fs::path& project, int64_t step) {
  xlaunch::checkpoint::write_atomically(xlaunch::checkpoint::named_path(project.string(), step),
                                        {{"step.txt", std::to_string(step)}});
}

std::vector<int64_t> steps_listed(const fs::path& project) {
  std::vector<int64_t> out;
  for (const auto& n : xlaunch::checkpoint::list_named(project.string())) out.push_back(n.complete ? n.step : -n.step);
  return out;
}

}  // namespace

TEST(NamedCheckpoints, NamedByStepListedByStepNotByName) {
  const fs::path p = scratch("named_list");
  for (int64_t step : {100, 9, 20}) save_named(p, step);
  fs::create_directories(p / "checkpoints" / "checkpoint_7");  // torn: no MANIFEST
  fs::create_directories(p / "checkpoints" / "checkpoint_x");  // not ours
  fs::create_directories(p / "checkpoints" / "checkpoint_30.tmp-abcdef");
  EXPECT_EQ(xlaunch::checkpoint::named_path(p.string(), 42), (p / "checkpoints" / "checkpoint_42").string());
  EXPECT_EQ(steps_listed(p), (std::vector<int64_t>{-7, 9, 20, 100}));
  EXPECT_THROW(xlaunch::checkpoint::checkpoints_dir(""), xlaunch::UsageError);
}

TEST(NamedCheckpoints, LatestSkipsTornOnesNamingThem) {
  const fs::path p = scratch("named_latest");
  save_named(p, 1);
  save_named(p, 2);
  save_named(p, 3);
  std::ofstream(p / "checkpoints" / "checkpoint_3" / "step.txt") << "damaged";
  fs::create_directories(p / "checkpoints" / "checkpoint_4");  // no MANIFEST
  std::vector<std::string> warned;
  std::string chosen;
  const auto files = xlaunch::checkpoint::read_latest(p.string(), &chosen, [&](const std::string& path, const std::string&) {
    warned.push_back(fs::path(path).filename().string());
  });
  EXPECT_EQ(files.at("step.txt"), "2");
  EXPECT_EQ(fs::path(chosen).filename(), "checkpoint_2");
  EXPECT_EQ(warned, (std::vector<std::string>{"checkpoint_4", "checkpoint_3"}));
  try {
    xlaunch::checkpoint::read_latest(scratch("named_none").string(), &chosen, [](auto&, auto&) {});
    FAIL() << "no checkpoint at all must be refused";
  } catch (const xlaunch::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("no complete checkpoint in"), std::string::npos) << e.what();
  }
}

TEST(NamedCheckpoints, RotationKeepsTheNewestCompleteOnesAndDropsTemporaries) {
  const fs::path p = scratch("named_rotate");
  for (int64_t step : {5, 10, 15, 20}) save_named(p, step);
  fs::create_directories(p / "checkpoints" / "checkpoint_3");                // torn, older than those kept
  fs::create_directories(p / "checkpoints" / "checkpoint_25.tmp-a1b2c3");     // an interrupted save
  fs::create_directories(p / "checkpoints" / "mine");                        // the user's: kept
  const std::string newest = xlaunch::checkpoint::named_path(p.string(), 20);
  auto removed = xlaunch::checkpoint::rotate(p.string(), 2, newest);
  EXPECT_EQ(removed.size(), 4u);
  EXPECT_EQ(steps_listed(p), (std::vector<int64_t>{15, 20}));
  EXPECT_TRUE(fs::exists(p / "checkpoints" / "mine"));
  EXPECT_FALSE(fs::exists(p / "checkpoints" / "checkpoint_25.tmp-a1b2c3"));
  // 0 keeps everything; a limit above the count removes nothing.
  EXPECT_TRUE(xlaunch::checkpoint::rotate(p.string(), 0, newest).empty());
  EXPECT_TRUE(xlaunch::checkpoint::rotate(p.string(), 5, newest).empty());
}
