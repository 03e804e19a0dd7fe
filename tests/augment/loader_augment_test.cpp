// The loader's augmentation (LoaderOptions::augment): the same augmented batches for 0, 1 and 4
// workers and across epochs' replays, equal to the Sequential applied by hand to the plain
// batches with BatchKey{seed, epoch, dataset indices}, and a sample's augmentation independent of
// the batch it lands in.
#include <gtest/gtest.h>

#include <ATen/TensorOperators.h>
#include <ATen/ops/equal.h>
#include <torch/data/datasets/base.h>
#include <torch/data/example.h>

#include <map>

#include "known_images.h"
#include "xlaunch/augment.h"
#include "xlaunch/loader.h"

namespace xlaunch::augment {
namespace {

std::shared_ptr<const Sequential> pipeline() {
  return std::make_shared<Sequential>(std::vector<std::shared_ptr<Transform>>{
      make("RandomAffine", {{"degrees", {30}}, {"translate", {0.1, 0.1}}, {"scale", {0.8, 1.2}}, {"p", {0.7}}}),
      make("RandomPerspective", {{"distortion_scale", {0.4}}, {"p", {0.7}}}), make("RandomHorizontalFlip")});
}

LoaderOptions options(int workers, int64_t batch, bool augmented) {
  LoaderOptions o;
  o.batch_size = batch;
  o.num_workers = workers;
  o.seed = 17;
  if (augmented) o.augment = pipeline();
  return o;
}

std::vector<int64_t> ids_of(const Batch& b) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < b.size(); ++i) ids.push_back(b.target[i].item<int64_t>());
  return ids;
}

// Two epochs' batches.
std::vector<Batch> two_epochs(const LoaderOptions& o) {
  Loader loader(KnownImages(12, 10, 45), o);
  std::vector<Batch> out;
  for (int e = 0; e < 2; ++e) {
    for (auto& b : loader) out.push_back(b);
  }
  return out;
}

TEST(LoaderAugment, SameBatchesForAnyWorkersAndEqualToTheSequentialByHand) {
  const std::vector<Batch> plain = two_epochs(options(1, 8, false));
  const std::vector<Batch> one = two_epochs(options(1, 8, true));
  ASSERT_EQ(one.size(), plain.size());
  const auto seq = pipeline();
  const size_t per_epoch = plain.size() / 2;
  for (size_t k = 0; k < plain.size(); ++k) {
    const int64_t epoch = k < per_epoch ? 0 : 1;
    const at::Tensor by_hand = (*seq)(plain[k].data, BatchKey{17, epoch, ids_of(plain[k])});
    EXPECT_TRUE(at::equal(one[k].data, by_hand)) << "batch " << k;
    EXPECT_FALSE(at::equal(one[k].data, plain[k].data)) << "batch " << k << " was not augmented";
    EXPECT_TRUE(at::equal(one[k].target, plain[k].target));
  }
  for (int workers : {0, 4}) {
    const std::vector<Batch> other = two_epochs(options(workers, 8, true));
    ASSERT_EQ(other.size(), one.size());
    for (size_t k = 0; k < one.size(); ++k) {
      EXPECT_TRUE(at::equal(other[k].data, one[k].data)) << workers << " workers, batch " << k;
    }
  }
}

TEST(LoaderAugment, ASamplesAugmentationDoesNotDependOnItsBatch) {
  std::map<int64_t, at::Tensor> by_eight, by_five;
  for (const Batch& b : two_epochs(options(2, 8, true))) {
    for (int64_t i = 0; i < b.size(); ++i) by_eight.emplace(b.target[i].item<int64_t>(), b.data[i]);
  }
  for (const Batch& b : two_epochs(options(2, 5, true))) {
    for (int64_t i = 0; i < b.size(); ++i) by_five.emplace(b.target[i].item<int64_t>(), b.data[i]);
  }
  ASSERT_EQ(by_eight.size(), 45u);
  for (const auto& [id, image] : by_eight) EXPECT_TRUE(at::equal(image, by_five.at(id))) << "sample " << id;
}

}  // namespace
}  // namespace xlaunch::augment
