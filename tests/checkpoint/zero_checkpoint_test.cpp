// Checkpoints at ZeRO stages 1, 2 and 3, ranks as threads: the layout file and the chunk planning from
// literal input; then training saved on one world size and stage and resumed on another, compared
// bit for bit with a run that continues from the same state gathered whole by the test itself
// (zero_resume.h); the files a sharded checkpoint holds; the refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <mutex>

#include "../runtime/inprocess_ranks.h"
#include "scratch_dir.h"
#include "state/checkpoint_dir.h"
#include "state/durable_files.h"
#include "state/model_shards.h"
#include "state/sharded_layout.h"
#include "state/safetensors_format.h"
#include "state/snapshots.h"
#include "state/training_run_parts.h"
#include "xlaunch/error.h"
#include "xlaunch/safetensors.h"
#include "zero_resume.h"

using namespace xlaunch::test;
using xlaunch::checkpoint::Chunk;
using xlaunch::checkpoint::NamedSegment;
using xlaunch::checkpoint::OptimizerLayout;
using xlaunch::checkpoint::PieceLayout;

namespace {

// Two ranks; model 0's "w" (6 elements) and "b" (2), model 1's "w" (3), one group.
// Rank 0: w[0, 4); rank 1: w[4, 6) + b[0, 2) in one piece, then model 1's w whole.
OptimizerLayout two_rank_layout() {
  OptimizerLayout l;
  l.world = 2;
  l.stage = 2;
  l.groups = 1;
  l.params = {{0, 0, "w", 6}, {0, 0, "b", 2}, {0, 1, "w", 3}};
  l.pieces = {{{PieceLayout{0, {{"w", 0, 4}}}}},
              {{PieceLayout{0, {{"w", 4, 2}, {"b", 0, 2}}}, PieceLayout{1, {{"w", 0, 3}}}}}};
  return l;
}

}  // namespace

TEST(ShardedLayout, TextRoundTripsAndNamesMayHoldSpaces) {
  OptimizerLayout l = two_rank_layout();
  l.params.push_back({0, 1, "odd name", 1});
  l.pieces[1][0].push_back(PieceLayout{1, {{"odd name", 0, 1}}});
  const std::string text = xlaunch::checkpoint::layout_text(l);
  EXPECT_EQ(text.substr(0, text.find("param")), "xlaunch sharded optimizer layout\nworld_size 2\nzero_stage 2\ngroups 1\n");
  EXPECT_NE(text.find("rank 1 group 0 pieces 3\npiece 0 2\nsegment 4 2 w\nsegment 0 2 b\n"), std::string::npos) << text;
  EXPECT_EQ(xlaunch::checkpoint::parse_layout(text, "x"), l);
  // The file as save_state writes it: the head, then each rank's own lines.
  OptimizerLayout head = l;
  head.pieces.clear();
  const std::string joined = xlaunch::checkpoint::layout_text(head) +
                             xlaunch::checkpoint::rank_layout_text(0, l.pieces[0]) +
                             xlaunch::checkpoint::rank_layout_text(1, l.pieces[1]);
  EXPECT_EQ(joined, text);
}

TEST(ShardedLayout, DamagedFilesAreRefusedNamingTheLine) {
  const std::string good = xlaunch::checkpoint::layout_text(two_rank_layout());
  auto error = [](const std::string& text) {
    try {
      xlaunch::checkpoint::parse_layout(text, "ck/optimizer_0/layout.txt");
    } catch (const xlaunch::UsageError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(error("something else\n").find("ck/optimizer_0/layout.txt line 1"), std::string::npos);
  std::string bad = good;
  bad.replace(bad.find("segment 4 2 w"), 13, "segment x 2 w");
  EXPECT_NE(error(bad).find("('segment x 2 w'): expected a number"), std::string::npos) << error(bad);
  // A rank's pieces missing.
  const std::string cut = good.substr(0, good.find("rank 1 group 0"));
  EXPECT_NE(error(cut).find("lists no pieces of rank 1 in group 0"), std::string::npos) << error(cut);
  EXPECT_NE(error(good.substr(0, good.size() - 8)).find("line"), std::string::npos);  // ends inside a piece
}

TEST(ShardedLayout, ChunksFindEveryElementInTheSavedPieces) {
  const xlaunch::checkpoint::SavedIndex index(two_rank_layout());
  // Model 0's w whole (a stage-0 tensor): rank 0's piece, then the start of rank 1's first.
  EXPECT_EQ(index.chunks(PieceLayout{0, {{"w", 0, 6}}}),
            (std::vector<Chunk>{{0, 0, 0, 0, 0, 4}, {1, 0, 0, 0, 4, 2}}));
  // Another cut: w[3, 6) + b[0, 1), across both ranks; then model 1's w[1, 3).
  EXPECT_EQ(index.chunks(PieceLayout{0, {{"w", 3, 3}, {"b", 0, 1}}}),
            (std::vector<Chunk>{{0, 0, 0, 3, 0, 1}, {1, 0, 0, 0, 1, 2}, {1, 0, 0, 2, 3, 1}}));
  EXPECT_EQ(index.chunks(PieceLayout{1, {{"w", 1, 2}}}), (std::vector<Chunk>{{1, 0, 1, 1, 0, 2}}));
  // Elements nobody saved are in no chunk (the caller refuses).
  EXPECT_TRUE(index.chunks(PieceLayout{1, {{"b", 0, 2}}}).empty());
}

namespace {

// A leg on leg.world threads: rank 0's results, replicas checked equal.
LegResult run_leg(const Leg& leg) {
  std::vector<LegResult> results(leg.world);
  run_ranks(leg.world, [&](std::shared_ptr<xlaunch::InProcessCommunicator> c) { results[c->rank()] = leg_on_rank(leg, c); });
  for (int r = 1; r < leg.world; ++r)
    EXPECT_TRUE(results[r].params.equal(results[0].params)) << "rank " << r << " differs from rank 0";
  return results[0];
}

void expect_same_state(const Whole& got, const Whole& want) {
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [k, t] : want) {
    ASSERT_TRUE(got.count(k)) << k;
    EXPECT_TRUE(got.at(k).equal(t)) << k;
  }
}

constexpr int kSaved = 6, kMore = 5;  // steps before the checkpoint, and after it

// Saved by `from` at step kSaved; resumed on `to`: the resumed run and the run started from the
// gathered state (the same layout as `to`) end with the same bits, parameters and state.
// `alter`, when given, changes the saved checkpoint before it is resumed.
void expect_resumes_exactly(Leg from, Leg to, std::string* log = nullptr,
                            const std::function<void(const std::string& dir)>& alter = {}) {
  ScratchDir dir;
  from.init = initial_params();
  from.from = 0;
  from.to = kSaved;
  from.save = dir.path + "/ckpt";
  const LegResult saved = run_leg(from);
  ASSERT_FALSE(saved.whole.empty());
  if (alter) alter(from.save);

  to.from = kSaved;
  to.to = kSaved + kMore;
  Leg resumed = to;
  resumed.init = initial_params(99);  // load_state replaces them
  resumed.load = from.save;
  if (log) testing::internal::CaptureStderr();
  const LegResult got = run_leg(resumed);
  if (log) *log = testing::internal::GetCapturedStderr();
  Leg straight = to;
  straight.init = unflatten(saved.params);
  straight.seed = &saved.whole;
  const LegResult want = run_leg(straight);
  EXPECT_TRUE(got.params.equal(want.params)) << "parameters differ after resuming";
  expect_same_state(got.whole, want.whole);
}

class ZeroResharding : public ::testing::TestWithParam<std::tuple<Opt, int, int>> {};

}  // namespace

// The check: saved on 4 ranks at stage 2, resumed on 2 and 3 ranks at stages 1 and 0.
TEST_P(ZeroResharding, FourRanksAtStageTwoResumeExactly) {
  const auto [opt, world, stage] = GetParam();
  std::string log;
  expect_resumes_exactly(Leg{4, 2, opt}, Leg{world, stage, opt}, &log);
  EXPECT_NE(log.find("optimizer state of 4 ranks at stage 2 re-sliced for " + std::to_string(world) + " ranks at stage " +
                     std::to_string(stage)),
            std::string::npos)
      << log;
}

INSTANTIATE_TEST_SUITE_P(Layouts, ZeroResharding,
                         ::testing::Combine(::testing::Values(Opt::Sgd, Opt::AdamW), ::testing::Values(2, 3),
                                            ::testing::Values(1, 0)));

TEST(ZeroCheckpoint, SameWorldAndStageResumesLikeTheUninterruptedRun) {
  for (Opt opt : {Opt::Sgd, Opt::AdamW}) {
    ScratchDir dir;
    Leg straight{3, 1, opt};
    straight.init = initial_params();
    straight.to = kSaved + kMore;
    const LegResult want = run_leg(straight);
    Leg first = straight;
    first.to = kSaved;
    first.save = dir.path + "/ckpt";
    run_leg(first);
    Leg second = straight;
    second.init = initial_params(99);
    second.from = kSaved;
    second.load = first.save;
    const LegResult got = run_leg(second);
    EXPECT_TRUE(got.params.equal(want.params)) << (opt == Opt::Sgd ? "SGD" : "AdamW");
    expect_same_state(got.whole, want.whole);
    // The state matters: the same steps from a fresh optimizer end elsewhere.
    Leg fresh = second;
    fresh.load.clear();
    const LegResult without_state = [&] {
      Leg f = fresh;
      Leg at_save = straight;
      at_save.to = kSaved;
      f.init = unflatten(run_leg(at_save).params);
      return run_leg(f);
    }();
    EXPECT_FALSE(without_state.params.equal(want.params));
  }
}

TEST(ZeroCheckpoint, StageZeroToStageTwoAndBackOnTheSameWorld) {
  for (Opt opt : {Opt::Sgd, Opt::AdamW}) {
    expect_resumes_exactly(Leg{2, 0, opt}, Leg{2, 2, opt});
    expect_resumes_exactly(Leg{2, 2, opt}, Leg{2, 0, opt});
  }
}

// Issue 43's check: saved on 4 ranks at stage 3, resumed on 3 at stage 3, on 2 at stage 2 and on 1
// at stage 0; and a stage-2 checkpoint resumed at stage 3.
TEST(ZeroCheckpoint, StageThreeResumesExactlyOnEveryLayout) {
  for (Opt opt : {Opt::Sgd, Opt::AdamW}) {
    for (const auto& [world, stage] : {std::pair{3, 3}, std::pair{2, 2}, std::pair{1, 0}}) {
      std::string log;
      expect_resumes_exactly(Leg{4, 3, opt}, Leg{world, stage, opt}, &log);
      EXPECT_NE(log.find("optimizer state of 4 ranks at stage 3 re-sliced for " + std::to_string(world) +
                         " ranks at stage " + std::to_string(stage)),
                std::string::npos)
          << log;
    }
    expect_resumes_exactly(Leg{2, 2, opt}, Leg{3, 3, opt});
  }
}

// A 3-step AdamW run of the Mlp on `world` threads at `stage`, saved to `path`; `before_save` runs
// on every rank just before save_state, `after_save` just after. Returns rank 0's parameters as
// get_state_dict gathers them.
// With `async` (checkpoint.async) it trains 2 more steps while the checkpoint is written, then
// waits for it (wait_for_checkpoint, whose error `after_save` sees as `waited`).
xlaunch::NamedTensors train_and_save(int world, int stage, const std::string& path,
                                     const std::function<void(int rank, xlaunch::Reducer&)>& before_save = {},
                                     const std::function<void(int rank)>& after_save = {}, bool async = false,
                                     std::vector<std::string>* waited = nullptr) {
  Leg leg{world, stage, Opt::AdamW};
  const auto init = initial_params();
  xlaunch::NamedTensors gathered;
  if (waited) waited->assign(world, "");
  run_ranks(world, [&](std::shared_ptr<xlaunch::InProcessCommunicator> c) {
    xlaunch::AcceleratorOptions o = leg_options(leg);
    o.checkpoint_async = async;
    xlaunch::Accelerator acc(o, c);
    Mlp mlp;
    {
      torch::NoGradGuard no_grad;
      auto params = mlp->parameters();
      for (size_t i = 0; i < params.size(); ++i) params[i].copy_(init[i]);
    }
    auto model = acc.prepare(mlp);
    auto inner = make_optimizer(mlp, leg.opt, true, false);
    auto& opt = acc.prepare(*inner);
    for (int step = 0; step < 3; ++step) {
      const Batch b = mlp_batch(c->rank(), step);
      acc.backward(loss_of(model(b.x), b.y));
      opt.step();
      opt.zero_grad();
    }
    if (before_save) before_save(c->rank(), acc.reducer(0));
    acc.save_state(path);
    if (async) {
      for (int step = 3; step < 5; ++step) {  // the state changes while the files are written
        const Batch b = mlp_batch(c->rank(), step);
        acc.backward(loss_of(model(b.x), b.y));
        opt.step();
        opt.zero_grad();
      }
      try {
        acc.wait_for_checkpoint();
      } catch (const xlaunch::Error& e) {
        if (waited) (*waited)[c->rank()] = e.what();
      }
    }
    if (after_save) after_save(c->rank());
    const auto state = acc.get_state_dict(model);
    if (c->rank() == 0) gathered = state;
  });
  return gathered;
}

// Issue 43/44: at stage 3 every rank's shard of the parameters goes into the checkpoint as it is,
// and nothing is gathered to save: no unit is whole while rank 0 writes the files. The shards
// assembled (as merge-weights does) are the parameters that get_state_dict gathers.
TEST(ZeroCheckpoint, StageThreeSavesEveryRanksShardAndGathersNothing) {
  ScratchDir dir;
  const std::string path = dir.path + "/ckpt";
  std::atomic<int> hook_calls{0}, whole_units{0};
  // Blocks of 64 bytes for the shards' CRC32s, where 1 MiB would hold each of these tiny files whole.
  xlaunch::checkpoint::set_crc_block_bytes(64);
  const xlaunch::NamedTensors gathered = train_and_save(
      3, 3, path,
      [&](int rank, xlaunch::Reducer& reducer) {
        if (rank != 0) return;
        xlaunch::checkpoint::set_save_hook([&](const std::string&) {
          ++hook_calls;
          for (size_t b = 0; b < reducer.buckets().size(); ++b) whole_units += reducer.unit_whole(b) ? 1 : 0;
        });
      },
      [](int rank) {
        if (rank == 0) xlaunch::checkpoint::set_save_hook({});
      });
  xlaunch::checkpoint::set_crc_block_bytes(1u << 20);
  EXPECT_GT(hook_calls.load(), 0);
  EXPECT_EQ(whole_units.load(), 0) << "units were gathered to save a stage-3 checkpoint";

  const auto files = xlaunch::checkpoint::read_verified(path);
  for (int r = 0; r < 3; ++r) EXPECT_TRUE(files.count("model_0/rank_" + std::to_string(r) + ".safetensors")) << r;
  EXPECT_TRUE(xlaunch::unpickle(files, "rank0/model_0.pt").empty()) << "the Mlp's parameters are all in the shards";
  const OptimizerLayout layout = xlaunch::checkpoint::parse_layout(
      files.at("model_0/layout.txt"), "layout", xlaunch::checkpoint::kModelLayoutHeader);
  EXPECT_EQ(layout.world, 3);
  EXPECT_EQ(layout.stage, 3);
  int64_t params = 0, pieces = 0;
  for (const auto& p : layout.params) params += p.numel;
  for (const auto& rank : layout.pieces)
    for (const auto& piece : rank[0]) pieces += piece.numel();
  EXPECT_EQ(pieces, params) << "every element saved once, no padding";
  EXPECT_NE(files.at("rank0/trainer_state.txt").find("format_version 3"), std::string::npos);
  EXPECT_NE(files.at("metadata.txt").find("model 0 'fc1.weight' [32, 20] Float sharded"), std::string::npos)
      << files.at("metadata.txt");

  const xlaunch::NamedTensors merged = xlaunch::checkpoint::SavedModel(files, 0).whole_model();
  ASSERT_EQ(merged.size(), gathered.size());
  std::map<std::string, at::Tensor> by_name(merged.begin(), merged.end());
  for (const auto& [name, t] : gathered) {
    ASSERT_TRUE(by_name.count(name)) << name;
    EXPECT_TRUE(by_name.at(name).equal(t)) << name;
  }

  // Issue 44's streaming export: the shards read in place, one entry at a time, each rank file
  // checked against the MANIFEST before any of it is used; the files themselves are safetensors.
  using xlaunch::checkpoint::CheckpointOnDisk;
  xlaunch::checkpoint::ReadInfo info;
  const auto shared = xlaunch::checkpoint::read_verified(
      path, nullptr, [](const std::string& p) { return !xlaunch::checkpoint::is_rank_file(p); }, &info);
  EXPECT_FALSE(shared.count("model_0/rank_1.safetensors")) << "a rank file is a rank's own";
  const CheckpointOnDisk disk{info.dir, xlaunch::checkpoint::parse_manifest(info.manifest, "MANIFEST")};
  // Each shard has its block CRC32s beside it (shared files, read by rank 0 like the layout), so
  // its ranges are checked as they are read instead of the whole file first: the whole model
  // assembled reads each file's bytes about once, where checking each file whole first reads them
  // twice (a checkpoint saved without them, as before, is still read so).
  uint64_t shard_bytes = 0;
  for (int r = 0; r < 3; ++r) {
    const std::string rank_path = "model_0/rank_" + std::to_string(r) + ".safetensors";
    ASSERT_TRUE(shared.count(rank_path + ".crc32")) << r;
    const auto blocks = xlaunch::checkpoint::parse_block_crcs(shared.at(rank_path + ".crc32"), rank_path);
    EXPECT_EQ(blocks.block, 64u);
    EXPECT_EQ(blocks.size, disk.manifest.at(rank_path).size);
    shard_bytes += blocks.size;
  }
  auto without_crcs = shared;
  for (int r = 0; r < 3; ++r) without_crcs.erase("model_0/rank_" + std::to_string(r) + ".safetensors.crc32");
  {
    xlaunch::checkpoint::SavedModel whole_checked(without_crcs, 0, &disk);
    for (const auto& [name, t] : gathered) EXPECT_TRUE(whole_checked.entry(name).equal(t)) << name;
    EXPECT_GE(whole_checked.bytes_read(), shard_bytes + shard_bytes * 9 / 10) << "the file checked whole, then read";
    xlaunch::checkpoint::SavedModel in_place(shared, 0, &disk);
    for (const auto& [name, t] : gathered) EXPECT_TRUE(in_place.entry(name).equal(t)) << name;
    EXPECT_EQ(in_place.bytes_read(), shard_bytes) << "each byte read once";
    std::printf("zero_checkpoint merge bytes read: %llu with block CRC32s, %llu checking whole files, of %llu\n",
                static_cast<unsigned long long>(in_place.bytes_read()),
                static_cast<unsigned long long>(whole_checked.bytes_read()),
                static_cast<unsigned long long>(shard_bytes));
    // One parameter: its bytes, the files' headers, and at most a block more at each end of a range.
    const auto& [name, t] = gathered.front();
    xlaunch::checkpoint::SavedModel one(shared, 0, &disk);
    EXPECT_TRUE(one.entry(name).equal(t));
    EXPECT_LT(one.bytes_read(), shard_bytes / 2) << name << " of " << gathered.size() << " parameters";
  }
  {
    xlaunch::checkpoint::SavedModel in_place(shared, 0, &disk);
    for (const auto& [name, t] : gathered) EXPECT_TRUE(in_place.entry(name).equal(t)) << name;
    // Into another dtype: read through a buffer of the saved one, then converted.
    const auto& [name, t] = gathered.front();
    const at::Tensor as_double =
        in_place.read(PieceLayout{0, {{name, 0, t.numel()}}}, at::empty({0}, at::TensorOptions().dtype(at::kDouble)));
    EXPECT_EQ(as_double.scalar_type(), at::kDouble);
    EXPECT_TRUE(as_double.equal(t.reshape({-1}).to(at::kDouble))) << name;
  }
  const auto rank_1 = xlaunch::load_safetensors(path + "/model_0/rank_1.safetensors");
  ASSERT_FALSE(rank_1.empty());
  EXPECT_EQ(rank_1[0].first, "piece.0");
  {
    std::fstream f(path + "/model_0/rank_1.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x7f');
  }
  // Damaged: the block that holds the byte is refused when it is read, naming the bytes, the file
  // and its CRC32s; without them, the whole file is refused when it is opened.
  for (const bool with_crcs : {true, false}) {
    xlaunch::checkpoint::SavedModel damaged(with_crcs ? shared : without_crcs, 0, &disk);
    try {
      for (const auto& [name, t] : gathered) damaged.entry(name);
      ADD_FAILURE() << "a corrupt shard file was read";
    } catch (const xlaunch::UsageError& e) {
      const std::string what = e.what();
      if (with_crcs) {
        EXPECT_NE(what.find("model_0/rank_1.safetensors have CRC32"), std::string::npos) << what;
        EXPECT_NE(what.find("its model_0/rank_1.safetensors.crc32 says"), std::string::npos) << what;
      } else {
        EXPECT_NE(what.find("model_0/rank_1.safetensors has"), std::string::npos) << what;
        EXPECT_NE(what.find("its MANIFEST says"), std::string::npos) << what;
      }
    }
  }
}

// Issue 44's streaming export: save_model at stage 3 has one unit whole at a time on every rank,
// never the model, and writes what get_state_dict gathers. One tensor per file ("1B"), so that the
// save hook looks after each tensor. With bf16 parameters in the forward and units kept whole after
// it (SHARD_GRAD_OP), an evaluation forward leaves every unit whole in bf16 before the save: the file
// still holds the fp32 parameters.
TEST(ZeroCheckpoint, StageThreeSaveModelGathersOneUnitAtATime) {
  ScratchDir dir;
  std::atomic<int> most_whole{0}, written{0};
  xlaunch::NamedTensors gathered;
  run_ranks(2, [&](std::shared_ptr<xlaunch::InProcessCommunicator> c) {
    xlaunch::AcceleratorOptions o = leg_options(Leg{2, 3, Opt::Sgd});
    o.mixed_precision = "bf16";
    o.ddp.fsdp_param_dtype = "bf16";
    o.ddp.reshard_after_forward = false;
    xlaunch::Accelerator acc(o, c);
    torch::nn::Sequential seq(torch::nn::Linear(6, 8), torch::nn::ReLU(), torch::nn::Linear(8, 8),
                              torch::nn::Linear(8, 3));
    {
      torch::NoGradGuard no_grad;
      float k = 1;
      for (auto& p : seq->parameters()) p.copy_(at::linspace(-k, k, p.numel()).view(p.sizes())), k += 0.5f;
    }
    auto model = acc.prepare(seq);
    torch::optim::SGD inner(seq->parameters(), torch::optim::SGDOptions(0.1));
    auto& opt = acc.prepare(inner);
    acc.backward(model(at::ones({4, 6}) * (c->rank() + 1)).pow(2).sum());
    opt.step();
    opt.zero_grad();
    xlaunch::Reducer& reducer = acc.reducer(0);
    ASSERT_GE(reducer.buckets().size(), 3u);
    {
      torch::NoGradGuard no_grad;
      model(at::ones({4, 6}));  // an evaluation: every unit stays whole, in bf16
    }
    int whole_before = 0;
    for (size_t b = 0; b < reducer.buckets().size(); ++b) whole_before += reducer.unit_whole(b) ? 1 : 0;
    EXPECT_GE(whole_before, 3) << "the evaluation left units whole";
    if (c->rank() == 0)
      xlaunch::set_safetensors_save_hook([&](const std::string& event) {
        if (event.rfind("wrote model-", 0) != 0) return;
        ++written;
        int whole = 0;
        for (size_t b = 0; b < reducer.buckets().size(); ++b) whole += reducer.unit_whole(b) ? 1 : 0;
        most_whole = std::max(most_whole.load(), whole);
      });
    acc.save_model(model, dir.path + "/model", "1B");
    if (c->rank() == 0) xlaunch::set_safetensors_save_hook({});
    for (size_t b = 0; b < reducer.buckets().size(); ++b) EXPECT_FALSE(reducer.unit_whole(b)) << "unit " << b << " left whole";
    const auto state = acc.get_state_dict(model);
    if (c->rank() == 0) gathered = state;
  });
  EXPECT_EQ(written.load(), 6) << "one file per tensor";
  EXPECT_EQ(most_whole.load(), 1) << "save_model gathered more than one unit at once";
  const xlaunch::NamedTensors saved = xlaunch::load_safetensors(dir.path + "/model");
  ASSERT_EQ(saved.size(), gathered.size());
  std::map<std::string, at::Tensor> by_name(saved.begin(), saved.end());
  for (const auto& [name, t] : gathered) {
    ASSERT_TRUE(by_name.count(name)) << name;
    EXPECT_EQ(by_name.at(name).scalar_type(), at::kFloat) << name;
    EXPECT_TRUE(by_name.at(name).equal(t)) << name;
  }
}

// A checkpoint of format_version 2 (the ranks' model shards as torch pickles, rank_<r>.pt) still
// resumes exactly, on another world size and stage.
TEST(ZeroCheckpoint, AFormatTwoCheckpointWithPickledShardsResumesExactly) {
  const auto to_format_two = [](const std::string& dir) {
    auto files = xlaunch::checkpoint::read_verified(dir);
    int converted = 0;
    for (auto it = files.begin(); it != files.end();) {
      const std::string path = it->first;
      const std::string suffix = ".safetensors";
      if (path.rfind("model_0/rank_", 0) != 0 || path.size() < suffix.size() ||
          path.compare(path.size() - suffix.size(), suffix.size(), suffix) != 0) {
        ++it;
        continue;
      }
      const std::string pickled = xlaunch::pickle_bytes(xlaunch::load_safetensors(dir + "/" + path));
      it = files.erase(it);
      files[path.substr(0, path.size() - suffix.size()) + ".pt"] = pickled;
      ++converted;
    }
    std::string& state = files.at("rank0/trainer_state.txt");
    const auto at = state.find("format_version 3");
    ASSERT_NE(at, std::string::npos) << state;
    state.replace(at, 16, "format_version 2");
    ASSERT_EQ(converted, 4);
    xlaunch::checkpoint::write_atomically(dir, files);
  };
  expect_resumes_exactly(Leg{4, 3, Opt::AdamW}, Leg{2, 3, Opt::AdamW}, nullptr, to_format_two);
  expect_resumes_exactly(Leg{4, 3, Opt::Sgd}, Leg{3, 0, Opt::Sgd}, nullptr, to_format_two);
}

thread_local int writer_rank = -1;  // the rank of the thread a save hook runs on

// Two checkpoints of the same state hold the same files, byte for byte, but the time in
// metadata.txt, and LibTorch archives (optimizer files), which carry a serialization id and hold
// their records in the order of a hash of the parameters' addresses (which differ between runs, and
// with them the archive's padding): the tests that need it compare those by what they restore.
void expect_same_files(const xlaunch::checkpoint::Files& a, const xlaunch::checkpoint::Files& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [path, bytes] : a) {
    ASSERT_TRUE(b.count(path)) << path;
    if (path.find("optimizer_") == std::string::npos && path != "metadata.txt")
      EXPECT_TRUE(bytes == b.at(path)) << path << " differs";
  }
}

// No save left a temporary directory in `dir`.
void expect_no_temporary(const std::string& dir) {
  for (const std::string& name : xlaunch::durable::entries(dir))
    EXPECT_EQ(name.find(".tmp-"), std::string::npos) << name << " left behind";
}

// Who writes what: where every rank sees the directory, each writes its own files (its generators,
// its optimizer and parameter shards) and rank 0 the rest; where one rank cannot see it, every
// rank's files travel to rank 0, which writes them all. Both checkpoints hold the same files, byte
// for byte (but the time in metadata.txt, and LibTorch archives, which carry a serialization id:
// those of the same size).
TEST(ZeroCheckpoint, EveryRankWritesItsOwnFilesOrSendsThemToRankZero) {
  ScratchDir dir;
  std::map<std::string, std::map<std::string, int>> writer;  // checkpoint -> file -> rank
  std::mutex mu;
  for (const std::string name : {"parallel", "via_rank0"}) {
    if (name == "via_rank0") xlaunch::checkpoint::set_shared_dir_hook([](int rank) { return rank == 2; });
    train_and_save(
        3, 3, dir.path + "/" + name,
        [&](int rank, xlaunch::Reducer&) {
          writer_rank = rank;
          if (rank == 0)
            xlaunch::checkpoint::set_save_hook([&, name](const std::string& event) {
              std::lock_guard<std::mutex> lock(mu);
              if (event.rfind("wrote ", 0) == 0) writer[name][event.substr(6)] = writer_rank;
            });
        },
        [](int rank) {
          if (rank == 0) xlaunch::checkpoint::set_save_hook({});
        });
    xlaunch::checkpoint::set_shared_dir_hook({});
  }
  for (const auto& [file, rank] : writer.at("parallel")) {
    const size_t at = file.find("rank_");
    const int owner = at == std::string::npos || file.rfind("ddp/", 0) == 0 ? 0 : file[at + 5] - '0';
    EXPECT_EQ(rank, owner) << file << " written by rank " << rank;
  }
  EXPECT_EQ(writer.at("parallel").at("model_0/rank_2.safetensors"), 2);
  EXPECT_EQ(writer.at("parallel").at("optimizer_0/rank_1.pt"), 1);
  EXPECT_EQ(writer.at("parallel").at("rng/rank_2.pt"), 2);
  for (const auto& [file, rank] : writer.at("via_rank0")) EXPECT_EQ(rank, 0) << file;
  EXPECT_EQ(writer.at("via_rank0").size(), writer.at("parallel").size());

  const auto a = xlaunch::checkpoint::read_verified(dir.path + "/parallel");
  const auto b = xlaunch::checkpoint::read_verified(dir.path + "/via_rank0");
  expect_same_files(a, b);
  EXPECT_FALSE(a.count(".xlaunch-probe"));
}

// Loads `path` on `world` threads at stage 3; returns, per rank, the ranks' own files it read
// (checkpoint_dir.h is_rank_file), and rank 0's parameters as get_state_dict gathers them; and
// into *in_place, per rank, the bytes it read in place (the model shards read by range).
std::pair<std::vector<std::set<std::string>>, xlaunch::NamedTensors> load_and_record(
    int world, const std::string& path, std::vector<uint64_t>* in_place = nullptr) {
  std::vector<std::set<std::string>> read(world);
  if (in_place) in_place->assign(world, 0);
  std::mutex mu;
  xlaunch::NamedTensors gathered;
  xlaunch::checkpoint::set_load_hook([&](const std::string& event) {
    const std::string file = event.substr(5);  // "read <path>"
    std::lock_guard<std::mutex> lock(mu);
    if (xlaunch::checkpoint::is_rank_file(file)) read[writer_rank].insert(file);
  });
  run_ranks(world, [&](std::shared_ptr<xlaunch::InProcessCommunicator> c) {
    writer_rank = c->rank();
    Leg leg{world, 3, Opt::AdamW};
    xlaunch::Accelerator acc(leg_options(leg), c);
    Mlp mlp;
    auto model = acc.prepare(mlp);
    auto inner = make_optimizer(mlp, leg.opt, true, false);
    acc.prepare(*inner);
    const uint64_t before = xlaunch::checkpoint::bytes_read_in_place_on_this_thread();
    acc.load_state(path);
    if (in_place) (*in_place)[c->rank()] = xlaunch::checkpoint::bytes_read_in_place_on_this_thread() - before;
    const auto state = acc.get_state_dict(model);
    if (c->rank() == 0) gathered = state;
  });
  xlaunch::checkpoint::set_load_hook({});
  return {read, gathered};
}

// What each rank reads to resume: its own generators, and of the optimizer's and the model's
// shards only the saved ranks' files that hold elements of its new shard. The Mlp is one unit of
// E = 2058 elements: 4 shards of 515, read back by 2 ranks of 1029 each, [0, 1029) from saved
// ranks 0 and 1, [1029, 2058) from 1 (whose shard ends at 1030), 2 and 3. Where one rank cannot see
// the directory, rank 0 reads every rank's files and sends them; the resume is the same.
// Of the model's shards (saved with block CRC32s, blocks of 64 bytes here) a rank reads only the
// ranges it holds, checked block by block: its shard's bytes, plus for each file it reads the
// file's header and at most a block at either end of its range; on the same layout, its own file
// once. (Whole files, checked first, would be read twice: 2.0x, and rank 1's three files 3.0x.)
TEST(ZeroCheckpoint, EachRankReadsOnlyTheSavedFilesItsPartOverlaps) {
  ScratchDir dir;
  const std::string path = dir.path + "/ckpt";
  xlaunch::checkpoint::set_crc_block_bytes(64);
  const xlaunch::NamedTensors saved = train_and_save(4, 3, path);
  xlaunch::checkpoint::set_crc_block_bytes(1u << 20);
  auto files_of = [](const std::string& what, std::initializer_list<int> ranks) {
    std::set<std::string> out;
    for (int r : ranks) {
      out.insert("model_0/rank_" + std::to_string(r) + ".safetensors");
      out.insert("optimizer_0/rank_" + std::to_string(r) + ".pt");
    }
    out.insert("rng/rank_" + what + ".pt");
    return out;
  };
  std::vector<uint64_t> same_bytes, half_bytes;
  const auto same = load_and_record(4, path, &same_bytes);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(same.first[r], files_of(std::to_string(r), {r})) << "rank " << r;
  const auto half = load_and_record(2, path, &half_bytes);
  EXPECT_EQ(half.first[0], files_of("0", {0, 1}));
  EXPECT_EQ(half.first[1], files_of("1", {1, 2, 3}));
  const auto files = xlaunch::checkpoint::read_verified(path);
  uint64_t header = 0;  // the largest safetensors header (its 8-byte length, then the JSON)
  for (int r = 0; r < 4; ++r) {
    const std::string& bytes = files.at("model_0/rank_" + std::to_string(r) + ".safetensors");
    uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    header = std::max(header, 8 + n);
  }
  const auto bound = [&](uint64_t shard, int files_read) { return shard + files_read * (header + 2 * 64); };
  for (int r = 0; r < 4; ++r)
    EXPECT_EQ(same_bytes[r], files.at("model_0/rank_" + std::to_string(r) + ".safetensors").size())
        << "rank " << r << " of 4: its own file, once";
  EXPECT_LE(half_bytes[0], bound(1029 * 4, 2));
  EXPECT_LE(half_bytes[1], bound(1029 * 4, 3));
  for (int r = 0; r < 2; ++r) {
    EXPECT_GE(half_bytes[r], 1029u * 4) << "rank " << r << " read less than its shard";
    std::printf("zero_checkpoint resume 4 -> 2 ranks: rank %d read %llu bytes of model shards for a shard of %d "
                "(%.2fx; headers of %llu bytes)\n", r, static_cast<unsigned long long>(half_bytes[r]), 1029 * 4,
                static_cast<double>(half_bytes[r]) / (1029 * 4), static_cast<unsigned long long>(header));
  }

  xlaunch::checkpoint::set_shared_dir_hook([](int rank) { return rank == 1; });
  const auto via_rank0 = load_and_record(2, path);
  xlaunch::checkpoint::set_shared_dir_hook({});
  EXPECT_EQ(via_rank0.first[0].size(), 4u * 2 + 4) << "rank 0 reads every rank's files";
  EXPECT_TRUE(via_rank0.first[1].empty());
  for (const auto* got : {&same.second, &half.second, &via_rank0.second}) {
    ASSERT_EQ(got->size(), saved.size());
    for (size_t i = 0; i < saved.size(); ++i) EXPECT_TRUE((*got)[i].second.equal(saved[i].second)) << saved[i].first;
  }
}

// checkpoint.async: save_state returns once every rank's state is serialized in memory; training
// goes on (two more steps) while a thread on every rank writes it, and wait_for_checkpoint waits
// until rank 0 has committed it. The checkpoint is the one the synchronous save writes of the same
// step, file for file: what happened after save_state returned is not in it.
TEST(ZeroCheckpoint, AnAsyncSaveWritesTheStateOfItsStepWhileTrainingGoesOn) {
  ScratchDir dir;
  train_and_save(3, 3, dir.path + "/sync");
  train_and_save(3, 3, dir.path + "/async", {}, {}, /*async=*/true);
  const auto a = xlaunch::checkpoint::read_verified(dir.path + "/sync");
  const auto b = xlaunch::checkpoint::read_verified(dir.path + "/async");
  expect_same_files(a, b);
  EXPECT_NE(b.at("rank0/trainer_state.txt").find("\nstep 3\n"), std::string::npos);
  expect_no_temporary(dir.path);
}

// Issue 44: an asynchronous save copies the model and the optimizer state at the step boundary
// (stage 0: rank 0's whole optimizer and model; stage 2: every rank's optimizer shard) and
// serializes the copies in the background, so the steps trained meanwhile change none of it: the
// checkpoint resumes to the state the synchronous save of the same step resumes to.
TEST(ZeroCheckpoint, AnAsyncSaveHoldsTheModelAndOptimizerStateOfItsStep) {
  for (int stage : {0, 2}) {
    ScratchDir dir;
    train_and_save(2, stage, dir.path + "/sync");
    train_and_save(2, stage, dir.path + "/async", {}, {}, /*async=*/true);
    expect_same_files(xlaunch::checkpoint::read_verified(dir.path + "/sync"),
                      xlaunch::checkpoint::read_verified(dir.path + "/async"));
    Leg leg{2, stage, Opt::AdamW};
    leg.init = initial_params(99);
    leg.from = leg.to = 3;
    leg.load = dir.path + "/sync";
    const LegResult want = run_leg(leg);
    leg.load = dir.path + "/async";
    const LegResult got = run_leg(leg);
    EXPECT_TRUE(got.params.equal(want.params)) << "stage " << stage;
    expect_same_state(got.whole, want.whole);
  }
}

// The copy an asynchronous save takes of an optimizer (state/snapshots.h) serializes, however the
// optimizer steps on, into the bytes its save() wrote when the copy was taken; for every optimizer
// type it knows, with the options that add state (momentum, amsgrad, centered). LBFGS: no copy.
TEST(ZeroCheckpoint, AnOptimizerSnapshotSerializesTheStateOfItsMoment) {
  using namespace torch::optim;
  const auto check = [](const std::string& what, const std::function<std::unique_ptr<Optimizer>(std::vector<at::Tensor>)>& make) {
    std::vector<at::Tensor> params{at::linspace(-1, 1, 12).view({3, 4}).requires_grad_(), at::ones({5}).requires_grad_()};
    std::unique_ptr<Optimizer> opt = make(params);
    const auto step = [&](int k) {
      for (auto& p : params) p.mutable_grad() = at::sin(p.detach() * k) + 0.1 * k;
      opt->step();
    };
    step(1);
    step(2);
    const std::string now = xlaunch::checkpoint::archive_bytes([&](auto& ar) { opt->save(ar); });
    const xlaunch::checkpoint::Producer later = xlaunch::checkpoint::optimizer_snapshot(*opt);
    ASSERT_TRUE(later) << what;
    step(3);
    step(4);
    EXPECT_TRUE(later() == now) << what << ": the copy moved with the optimizer";
    EXPECT_FALSE(xlaunch::checkpoint::archive_bytes([&](auto& ar) { opt->save(ar); }) == now) << what;
  };
  check("SGD", [](auto p) { return std::make_unique<SGD>(p, SGDOptions(0.1).momentum(0.9).nesterov(true)); });
  check("Adam", [](auto p) { return std::make_unique<Adam>(p, AdamOptions(0.01).amsgrad(true)); });
  check("AdamW", [](auto p) { return std::make_unique<AdamW>(p, AdamWOptions(0.01).weight_decay(0.1)); });
  check("Adagrad", [](auto p) { return std::make_unique<Adagrad>(p, AdagradOptions(0.1)); });
  check("RMSprop", [](auto p) { return std::make_unique<RMSprop>(p, RMSpropOptions(0.01).momentum(0.5).centered(true)); });
  std::vector<at::Tensor> params{at::ones({3}).requires_grad_()};
  LBFGS lbfgs(params, LBFGSOptions(0.1));
  EXPECT_FALSE(xlaunch::checkpoint::optimizer_snapshot(lbfgs)) << "LBFGS is serialized at once";
  // A subclass may save more than its base: serialized at once too.
  struct MyAdam : Adam {
    using Adam::Adam;
  };
  MyAdam mine(params, AdamOptions(0.1));
  EXPECT_FALSE(xlaunch::checkpoint::optimizer_snapshot(mine)) << "a subclass of Adam is serialized at once";
}

// The model's copies (rank 0's whole entries, a rank's parameter shard) serialize into the bytes of
// the tensors when copied, whatever happens to them after.
TEST(ZeroCheckpoint, AModelSnapshotSerializesTheValuesOfItsMoment) {
  const xlaunch::NamedTensors tensors{{"w", at::linspace(0, 1, 10)}, {"b", at::arange(4, at::kLong)}};
  const std::string pickled = xlaunch::pickle_bytes(tensors);
  const std::string safetensors = xlaunch::safetensors::file_bytes(tensors);
  const xlaunch::checkpoint::Producer later_pickle = xlaunch::checkpoint::pickle_snapshot(tensors);
  const xlaunch::checkpoint::Producer later_safetensors = xlaunch::checkpoint::safetensors_snapshot(tensors);
  for (const auto& [name, t] : tensors) at::Tensor(t).add_(1);
  EXPECT_TRUE(later_pickle() == pickled);
  EXPECT_TRUE(later_safetensors() == safetensors);
  EXPECT_FALSE(xlaunch::safetensors::file_bytes(tensors) == safetensors);
}

// A rank that fails to write its part in the background: wait_for_checkpoint throws on every rank,
// naming it, and the previous checkpoint stays in place, whole; nothing half-written is left.
TEST(ZeroCheckpoint, AFailedAsyncSaveIsReportedOnEveryRankAndKeepsThePreviousCheckpoint) {
  ScratchDir dir;
  const std::string path = dir.path + "/ckpt";
  train_and_save(3, 3, path);
  std::vector<std::string> waited;
  train_and_save(
      3, 3, path,
      [](int rank, xlaunch::Reducer&) {
        if (rank == 0)
          xlaunch::checkpoint::set_save_hook([](const std::string& event) {
            if (event == "wrote model_0/rank_1.safetensors") throw xlaunch::Error("disk full (injected)");
          });
      },
      [](int rank) {
        if (rank == 0) xlaunch::checkpoint::set_save_hook({});
      },
      /*async=*/true, &waited);
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(waited[r].find("failed on rank"), std::string::npos) << "rank " << r << ": " << waited[r];
    EXPECT_NE(waited[r].find("rank 1 could not write its part: disk full (injected)"), std::string::npos) << waited[r];
    EXPECT_NE(waited[r].find("previous checkpoint is kept"), std::string::npos) << waited[r];
  }
  const auto files = xlaunch::checkpoint::read_verified(path);
  EXPECT_NE(files.at("rank0/trainer_state.txt").find("\nstep 3\n"), std::string::npos);
  expect_no_temporary(dir.path);
}

// A frozen parameter stays whole at stage 3: it is in rank 0's file beside the shards, and a
// resume on another layout (1 process at stage 0, 3 ranks at stage 3) puts every entry back.
TEST(ZeroCheckpoint, StageThreeKeepsFrozenParametersWholeAndResumesOnAnyLayout) {
  ScratchDir dir;
  const std::string path = dir.path + "/ckpt";
  auto leg = [&](int world, int stage, const std::vector<at::Tensor>& start, bool save) {
    xlaunch::NamedTensors out;
    run_ranks(world, [&](std::shared_ptr<xlaunch::InProcessCommunicator> c) {
      Leg l{world, stage, Opt::Sgd};
      xlaunch::Accelerator acc(leg_options(l), c);
      Mlp mlp;
      {
        torch::NoGradGuard no_grad;
        auto params = mlp->parameters();
        for (size_t i = 0; i < params.size(); ++i) params[i].copy_(start[i]);
      }
      mlp->fc2->bias.set_requires_grad(false);
      auto model = acc.prepare(mlp);
      std::vector<at::Tensor> trainable;
      for (const auto& p : mlp->parameters())
        if (p.requires_grad()) trainable.push_back(p);
      torch::optim::SGD inner(trainable, torch::optim::SGDOptions(0.05).momentum(0.9));
      auto& opt = acc.prepare(inner);
      if (save) {
        for (int step = 0; step < 3; ++step) {
          const Batch b = mlp_batch(c->rank(), step);
          acc.backward(loss_of(model(b.x), b.y));
          opt.step();
          opt.zero_grad();
        }
        acc.save_state(path);
      } else {
        acc.load_state(path);
      }
      const auto state = acc.get_state_dict(model);
      if (c->rank() == 0) out = state;
    });
    return out;
  };
  const xlaunch::NamedTensors saved = leg(2, 3, initial_params(), true);
  const auto files = xlaunch::checkpoint::read_verified(path);
  const xlaunch::NamedTensors whole = xlaunch::unpickle(files, "rank0/model_0.pt");
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_EQ(whole[0].first, "fc2.bias");
  for (const auto& [world, stage] : {std::pair{1, 0}, std::pair{3, 3}}) {
    const xlaunch::NamedTensors got = leg(world, stage, initial_params(99), false);
    ASSERT_EQ(got.size(), saved.size());
    for (size_t i = 0; i < saved.size(); ++i) {
      EXPECT_EQ(got[i].first, saved[i].first);
      EXPECT_TRUE(got[i].second.equal(saved[i].second)) << saved[i].first << " on " << world << " ranks at stage " << stage;
    }
  }
}

// A damaged model layout (a rank's pieces missing) is refused naming what is missing, and a
// missing tensors.txt naming the file.
TEST(ZeroCheckpoint, ADamagedShardedModelLayoutIsRefused) {
  using xlaunch::checkpoint::SavedModel;
  OptimizerLayout l;
  l.world = 2;
  l.stage = 3;
  l.groups = 1;
  l.params = {{0, 0, "w", 4}};
  l.pieces.assign(2, std::vector<std::vector<PieceLayout>>(1));
  l.pieces[0][0].push_back(PieceLayout{0, {{"w", 0, 2}}});  // rank 1's w[2, 4) is missing
  xlaunch::checkpoint::Files files;
  files["rank0/model_0.pt"] = xlaunch::pickle_bytes({});
  files["model_0/layout.txt"] = xlaunch::checkpoint::layout_text(l, xlaunch::checkpoint::kModelLayoutHeader);
  EXPECT_THROW(
      {
        try {
          SavedModel saved(files, 0);
        } catch (const xlaunch::UsageError& e) {
          EXPECT_NE(std::string(e.what()).find("model_0/tensors.txt"), std::string::npos) << e.what();
          throw;
        }
      },
      xlaunch::UsageError);
  files["model_0/tensors.txt"] = "tensor Float 1 4 w\n";
  SavedModel saved(files, 0);
  const auto gap = saved.missing(PieceLayout{0, {{"w", 0, 4}}});
  ASSERT_TRUE(gap.has_value());
  EXPECT_EQ(*gap, "'w' [0, 4)");
  EXPECT_FALSE(saved.missing(PieceLayout{0, {{"w", 0, 2}}}).has_value());
  EXPECT_EQ(saved.described().at(0).second.sizes(), at::IntArrayRef({4}));
}

TEST(ZeroCheckpoint, AnotherBucketCapResumesExactly) {
  Leg from{2, 1, Opt::AdamW};
  Leg to = from;
  to.bucket_cap_mb = 0.01;  // fc2 and fc1 in one bucket (two before): other pieces on the same ranks
  std::string log;
  expect_resumes_exactly(from, to, &log);
  EXPECT_NE(log.find("re-sliced for this run's buckets"), std::string::npos) << log;
}

TEST(ZeroCheckpoint, ASingleProcessResumesAFourRankCheckpoint) {
  expect_resumes_exactly(Leg{4, 2, Opt::AdamW}, Leg{1, 0, Opt::AdamW});
  expect_resumes_exactly(Leg{4, 1, Opt::Sgd}, Leg{1, 1, Opt::Sgd});
}

TEST(ZeroCheckpoint, FilesHoldEveryRanksStateAndTheLayout) {
  ScratchDir dir;
  Leg leg{3, 2, Opt::AdamW};
  leg.init = initial_params();
  leg.to = 2;
  leg.save = dir.path + "/sharded";
  run_leg(leg);
  const auto files = xlaunch::checkpoint::read_verified(leg.save);
  for (int r = 0; r < 3; ++r) EXPECT_TRUE(files.count("optimizer_0/rank_" + std::to_string(r) + ".pt")) << r;
  EXPECT_FALSE(files.count("optimizer_0/rank_3.pt"));
  EXPECT_FALSE(files.count("rank0/optimizer_0.pt"));
  const OptimizerLayout layout = xlaunch::checkpoint::parse_layout(files.at("optimizer_0/layout.txt"), "layout");
  EXPECT_EQ(layout.world, 3);
  EXPECT_EQ(layout.stage, 2);
  EXPECT_EQ(layout.groups, 2);
  ASSERT_EQ(layout.params.size(), 6u);
  EXPECT_EQ(layout.params[0].name, "fc1.weight");
  EXPECT_EQ(layout.params[0].numel, 640);
  EXPECT_EQ(layout.params[3].name, "fc1.bias");
  EXPECT_EQ(layout.params[3].group, 1);
  const std::string meta = files.at("metadata.txt");
  EXPECT_NE(meta.find("world_size 3\nzero_stage 2\n"), std::string::npos) << meta;
  EXPECT_NE(files.at("rank0/trainer_state.txt").find("zero_stage 2"), std::string::npos);
  // Stage 0 writes the optimizer as before: one file of rank 0's.
  leg.stage = 0;
  leg.save = dir.path + "/whole";
  run_leg(leg);
  const auto whole = xlaunch::checkpoint::read_verified(leg.save);
  EXPECT_TRUE(whole.count("rank0/optimizer_0.pt"));
  EXPECT_FALSE(whole.count("optimizer_0/layout.txt"));
}

namespace {

// The message every rank of a refused resume throws (they must agree).
std::string refusal(const Leg& saved_leg, Leg resume) {
  ScratchDir dir;
  Leg s = saved_leg;
  s.init = initial_params();
  s.to = 2;
  s.save = dir.path + "/ckpt";
  run_leg(s);
  resume.init = initial_params();
  resume.load = s.save;
  std::vector<std::string> what(resume.world);
  run_ranks(resume.world, [&](std::shared_ptr<xlaunch::InProcessCommunicator> c) {
    try {
      leg_on_rank(resume, c);
    } catch (const xlaunch::UsageError& e) {
      what[c->rank()] = e.what();
    }
  });
  for (int r = 1; r < resume.world; ++r) EXPECT_EQ(what[r], what[0]) << "rank " << r;
  return what[0];
}

}  // namespace

TEST(ZeroCheckpoint, RefusesOtherGroupsOrOptimizersNamingTheCheckpoint) {
  Leg saved{4, 2, Opt::AdamW};
  Leg one_group{2, 1, Opt::AdamW};
  one_group.groups = false;
  const std::string groups = refusal(saved, one_group);
  EXPECT_NE(groups.find("optimizer 0 of checkpoint /tmp/"), std::string::npos) << groups;
  EXPECT_NE(groups.find("has 2 parameter groups, this optimizer has 1"), std::string::npos) << groups;
  EXPECT_NE(groups.find("Build the optimizer as the program that saved it did"), std::string::npos) << groups;

  const std::string kind = refusal(Leg{4, 2, Opt::Sgd}, Leg{2, 1, Opt::AdamW, false});
  EXPECT_NE(kind.find("are not this optimizer's kind"), std::string::npos) << kind;

  // Groups that hold other parameters than when saved: named, by parameter.
  Leg swapped{2, 1, Opt::AdamW};
  swapped.biases_first = true;
  const std::string names = refusal(saved, swapped);
  EXPECT_NE(names.find("the optimizer's parameter 0 is 'fc1.bias' of model 0 (32 elements) in group 0 here, and "
                       "'fc1.weight' of model 0 (640 elements) in group 0 in optimizer 0 of checkpoint"),
            std::string::npos)
      << names;

  // A stage-0 checkpoint whose groups held other parameters.
  Leg whole_one_group{2, 0, Opt::AdamW, false};
  const std::string sizes = refusal(whole_one_group, Leg{2, 1, Opt::AdamW});
  EXPECT_NE(sizes.find("has 1 parameter groups, this optimizer has 2"), std::string::npos) << sizes;
}
