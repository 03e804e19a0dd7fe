// The Fashion-MNIST reader on the real files of dataset-fashion-mnist.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "xlaunch/error.h"
#include "xlaunch/fashion_mnist.h"
#include "xlaunch/loader.h"

namespace {

using xlaunch::FashionMnist;

void expect_split(FashionMnist::Split split, int64_t n) {
  FashionMnist ds(split);
  ASSERT_EQ(ds.size().value(), static_cast<size_t>(n));
  EXPECT_EQ(ds.images().sizes(), (std::vector<int64_t>{n, 28, 28}));
  EXPECT_EQ(ds.targets().min().item<int64_t>(), 0);
  EXPECT_EQ(ds.targets().max().item<int64_t>(), 9);
  EXPECT_EQ(ds.images().max().item<int64_t>(), 255);
  EXPECT_EQ(ds.images().min().item<int64_t>(), 0);
  // Fashion-MNIST is balanced: n / 10 images per class.
  for (int64_t c = 0; c < 10; ++c) EXPECT_EQ(ds.targets().eq(c).sum().item<int64_t>(), n / 10) << "class " << c;
  const auto ex = ds.get(0);
  EXPECT_EQ(ex.data.sizes(), (std::vector<int64_t>{1, 28, 28}));
  EXPECT_EQ(ex.data.scalar_type(), at::kFloat);
  EXPECT_GE(ex.data.min().item<float>(), 0.0f);
  EXPECT_LE(ex.data.max().item<float>(), 1.0f);
  EXPECT_EQ(ex.target.item<int64_t>(), ds.targets()[0].item<int64_t>());
}

TEST(FashionMnist, TrainSplitHas60000LabelledImages) {
  expect_split(FashionMnist::Split::Train, 60000);
  // The first training image is an ankle boot (label 9), as in Zalando's README.
  EXPECT_EQ(FashionMnist(FashionMnist::Split::Train).targets()[0].item<int64_t>(), 9);
}

TEST(FashionMnist, TestSplitHas10000LabelledImages) { expect_split(FashionMnist::Split::Test, 10000); }

TEST(FashionMnist, MissingFilesNameThePackage) {
  try {
    FashionMnist ds(FashionMnist::Split::Test, "/nonexistent/fashion");
    FAIL() << "no error for a missing directory";
  } catch (const xlaunch::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("dataset-fashion-mnist"), std::string::npos) << e.what();
  }
}

TEST(FashionMnist, MalformedFileIsNamed) {
  const std::string path = testing::TempDir() + "bad-idx";
  std::ofstream(path) << "not an idx file";
  try {
    xlaunch::read_idx_file(path);
    FAIL() << "no error for a malformed file";
  } catch (const xlaunch::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
}

TEST(FashionMnist, LoadsThroughTheLoader) {
  xlaunch::LoaderOptions o;
  o.batch_size = 256;
  o.num_workers = 2;
  o.rank = 1;
  o.world_size = 3;
  xlaunch::Loader loader(FashionMnist(FashionMnist::Split::Test), o);
  int64_t rows = 0;
  for (auto& b : loader) {
    EXPECT_EQ(b.data.sizes().slice(1), (std::vector<int64_t>{1, 28, 28}));
    rows += b.size();
  }
  EXPECT_EQ(rows, 3334);  // ceil(10000 / 3)
}

}  // namespace
