// Sequential: a run of row-by-row transforms applied a few rows at a time, over threads or on one,
// gives the whole batch's values; a transform that mixes samples, refuses a chunk, or wrongly says
// it goes row by row gets the whole batch or is named.
#include <gtest/gtest.h>

#include <ATen/TensorOperators.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/rand.h>

#include <atomic>

#include "augment/rows.h"
#include "xlaunch/augment.h"
#include "xlaunch/error.h"
#include "augment_samples.h"
#include "usage_error.h"

namespace xlaunch::augment {
namespace {

// Each transform in turn over the whole batch: what Sequential computes, however it splits it.
at::Tensor one_by_one(const std::vector<std::shared_ptr<Transform>>& transforms, const at::Tensor& images,
                      const BatchKey& key) {
  at::Tensor out = images;
  for (size_t i = 0; i < transforms.size(); ++i) {
    out = transforms[i]->apply(out, transforms[i]->draw(key, static_cast<int>(i), out.size(2), out.size(3)));
  }
  return out;
}

std::vector<std::shared_ptr<Transform>> every_builtin() {
  return {make("ColorJitter", {{"brightness", {0.4}}, {"contrast", {0.4}}, {"saturation", {0.4}}, {"hue", {0.1}}}),
          affine(0.5), make("RandomPerspective", {{"distortion_scale", {0.5}}, {"p", {0.7}}}),
          make("RandomResizedCrop", {{"size", {150, 170}}}), make("RandomHorizontalFlip"),
          make("Normalize", {{"mean", {0.5, 0.4, 0.3}}, {"std", {0.2, 0.25, 0.3}}})};
}

// A user's transform with nothing to draw (the tests below give apply() and row_by_row()).
class NoDraws : public Transform {
 public:
  std::vector<std::string> columns() const override { return {}; }
  const Options& options() const override { return options_; }
  void sample(Rng&, int64_t, int64_t, double*) const override {}

 private:
  Options options_;
};

// A user's row-by-row transform that changes nothing and notes the most rows it was given.
class MostRows final : public NoDraws {
 public:
  std::string name() const override { return "MostRows"; }
  at::Tensor apply(const at::Tensor& images, const Params&) const override {
    int64_t seen = most.load();
    while (images.size(0) > seen && !most.compare_exchange_weak(seen, images.size(0))) {
    }
    return images;
  }
  bool row_by_row() const override { return true; }
  mutable std::atomic<int64_t> most{0};
};

// A run of row-by-row transforms goes through Sequential a few rows at a time (about 1 MB: one
// 300 x 300 RGB row here), spread over threads or on one: bitwise the whole batch's values.
TEST(Sequential, RowsInChunksGiveTheWholeBatchsValues) {
  const at::Tensor x = at::rand({5, 3, 300, 300});
  const BatchKey key{17, 2, {40, 41, 42, 43, 44}};
  std::vector<std::shared_ptr<Transform>> transforms = every_builtin();
  const auto most = std::make_shared<MostRows>();
  transforms.push_back(most);
  const Sequential seq(transforms);
  const at::Tensor want = one_by_one(seq.transforms(), x, key);
  EXPECT_EQ(want.sizes(), (std::vector<int64_t>{5, 3, 150, 170}));
  most->most = 0;
  EXPECT_TRUE(at::equal(seq(x, key), want));
  EXPECT_EQ(most->most.load(), 1);  // the run went one row at a time
  detail::rows_on_this_thread_only = true;
  const at::Tensor alone = seq(x, key);
  detail::rows_on_this_thread_only = false;
  EXPECT_TRUE(at::equal(alone, want));
  // Small images: several rows a chunk.
  const at::Tensor small = at::rand({37, 3, 20, 24});
  const Sequential seq_small({affine(0.5), make("RandomPerspective", {{"distortion_scale", {0.5}}})});
  EXPECT_TRUE(at::equal(seq_small(small, key_of(37)), one_by_one(seq_small.transforms(), small, key_of(37))));
}

// A user's transform that mixes samples keeps row_by_row() false and gets the whole batch, between
// runs that go in chunks.
class ReverseRows final : public NoDraws {
 public:
  std::string name() const override { return "ReverseRows"; }
  at::Tensor apply(const at::Tensor& images, const Params&) const override { return images.flip(0); }
};

TEST(Sequential, ATransformThatMixesSamplesGetsTheWholeBatch) {
  const at::Tensor x = at::rand({6, 3, 300, 300});
  std::vector<std::shared_ptr<Transform>> transforms = every_builtin();
  transforms.insert(transforms.begin() + 2, std::make_shared<ReverseRows>());
  const Sequential seq(transforms);
  EXPECT_TRUE(at::equal(seq(x, key_of(6)), one_by_one(transforms, x, key_of(6))));
}

// A refusal (check_apply's, here for gray images only) names the batch's shape, not a chunk's.
class GrayOnly final : public NoDraws {
 public:
  std::string name() const override { return "GrayOnly"; }
  at::Tensor apply(const at::Tensor& images, const Params& params) const override {
    check_apply(*this, images, params, {1});
    return images;
  }
  bool row_by_row() const override { return true; }
};

TEST(Sequential, ARefusalNamesTheBatchsShape) {
  const Sequential seq({affine(), std::make_shared<GrayOnly>()});
  const std::string message = xlaunch::test::usage_error_of([&] { seq(at::rand({6, 3, 300, 300}), key_of(6)); });
  EXPECT_NE(message.find("GrayOnly"), std::string::npos) << message;
  EXPECT_NE(message.find("[6, 3, 300, 300]"), std::string::npos) << message;
}

// A transform that refuses a chunk but takes the whole batch: the run is applied whole, and the
// result is the whole batch's.
class WholeBatchesOnly final : public NoDraws {
 public:
  std::string name() const override { return "WholeBatchesOnly"; }
  at::Tensor apply(const at::Tensor& images, const Params&) const override {
    if (images.size(0) < 6) throw UsageError("WholeBatchesOnly: give it all 6 rows");
    return images * 2;
  }
  bool row_by_row() const override { return true; }
};

TEST(Sequential, ARunAChunkOfWhichIsRefusedIsAppliedWhole) {
  const at::Tensor x = at::rand({6, 3, 300, 300});
  const std::vector<std::shared_ptr<Transform>> transforms = {affine(), std::make_shared<WholeBatchesOnly>(),
                                                              make("RandomPerspective", {{"p", {0.5}}})};
  EXPECT_TRUE(at::equal(Sequential(transforms)(x, key_of(6)), one_by_one(transforms, x, key_of(6))));
}

// A transform that says row_by_row() but changes the channels is named, with the fix.
class WrongRowByRow final : public NoDraws {
 public:
  std::string name() const override { return "WrongRowByRow"; }
  at::Tensor apply(const at::Tensor& images, const Params&) const override { return images.narrow(1, 0, 1); }
  bool row_by_row() const override { return true; }
};

TEST(Sequential, ATransformWronglyRowByRowIsNamed) {
  const Sequential seq({affine(), std::make_shared<WrongRowByRow>()});
  const std::string message = xlaunch::test::usage_error_of([&] { seq(at::rand({4, 3, 16, 16}), key_of(4)); });
  EXPECT_NE(message.find("WrongRowByRow says row_by_row()"), std::string::npos) << message;
  EXPECT_NE(message.find("make row_by_row() return false"), std::string::npos) << message;
}

}  // namespace
}  // namespace xlaunch::augment
