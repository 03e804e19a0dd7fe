// SyncBatchNorm with ranks as threads (InProcessCommunicator): equal to BatchNorm on the
// concatenated batch; the conversion from BatchNorm; acc.prepare with sync_batchnorm.
#include <gtest/gtest.h>

#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>

#include <sstream>

#include "inprocess_ranks.h"
#include "models.h"
#include "sync_batchnorm_check.h"
#include "xlaunch/accelerator.h"
#include "xlaunch/error.h"
#include "xlaunch/sync_batchnorm.h"

using namespace xlaunch::test;
using xlaunch::InProcessCommunicator;
using xlaunch::SyncBatchNorm;
using xlaunch::SyncBatchNormImpl;

namespace {

template <typename BatchNorm>
void on_ranks(const SyncBnCase& k) {
  run_ranks(static_cast<int>(k.rows.size()), [&](std::shared_ptr<InProcessCommunicator> c) {
    expect_sync_batchnorm_equals_batchnorm<BatchNorm>(k, c);
  });
}

}  // namespace

TEST(SyncBatchNorm, Input1dOnThreeRanksOfUnequalBatches) {
  on_ranks<torch::nn::BatchNorm1d>({{4, 7, 2}, {}});
  on_ranks<torch::nn::BatchNorm1d>({{3, 1, 5}, {6}});
}

TEST(SyncBatchNorm, Input2dOnThreeRanksOfUnequalBatches) { on_ranks<torch::nn::BatchNorm2d>({{2, 5, 1}, {3, 4}}); }

TEST(SyncBatchNorm, Input3d) { on_ranks<torch::nn::BatchNorm3d>({{1, 2, 1}, {2, 3, 2}}); }

TEST(SyncBatchNorm, ARankWithNoRows) {
  on_ranks<torch::nn::BatchNorm1d>({{6, 0, 3}, {}});
  on_ranks<torch::nn::BatchNorm2d>({{0, 2, 3}, {2, 2}});
}

TEST(SyncBatchNorm, CumulativeAverageWithoutMomentum) {
  on_ranks<torch::nn::BatchNorm1d>({{4, 7, 2}, {}, 5, std::nullopt, 3});
}

TEST(SyncBatchNorm, OneRankEqualsBatchNorm) { on_ranks<torch::nn::BatchNorm2d>({{5}, {2, 3}}); }

TEST(SyncBatchNorm, WithoutCommunicatorItIsLocalBatchNorm) {
  torch::manual_seed(3);
  SyncBatchNorm sync(4);
  torch::nn::BatchNorm1d bn(4);
  const at::Tensor x = at::randn({6, 4});
  EXPECT_LT(rel_err(sync(x), bn(x)), 1e-6);
  EXPECT_LT(rel_err(sync->running_var, bn->running_var), 1e-6);
}

TEST(SyncBatchNorm, NamesAWrongInput) {
  SyncBatchNorm sync(4);
  try {
    sync(at::randn({6, 3}));
    FAIL();
  } catch (const xlaunch::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("C = 4, got [6, 3]"), std::string::npos) << e.what();
  }
}

TEST(ConvertSyncBatchNorm, SequentialAndModuleListKeepTheirTensorsAndCallTheNewLayers) {
  torch::nn::Sequential inner(torch::nn::Linear(5, 5), torch::nn::BatchNorm1d(torch::nn::BatchNormOptions(5).eps(1e-3)));
  torch::nn::Sequential model(torch::nn::Linear(4, 5), torch::nn::BatchNorm1d(5), torch::nn::ReLU());
  torch::nn::ModuleList list(torch::nn::BatchNorm2d(3));
  model->register_module("inner", inner);  // a Sequential cannot hold one in its entries
  model->register_module("list", list);
  auto old_bn = std::dynamic_pointer_cast<torch::nn::BatchNorm1dImpl>(model->ptr(1));
  auto inner_bn = std::dynamic_pointer_cast<torch::nn::BatchNorm1dImpl>(inner->ptr(1));
  {
    torch::NoGradGuard g;
    old_bn->running_mean.fill_(0.5);
  }
  old_bn->eval();
  const at::Tensor weight = old_bn->weight;
  old_bn.reset();
  inner_bn.reset();

  EXPECT_EQ(xlaunch::convert_sync_batchnorm(*model), 3);
  auto sync = std::dynamic_pointer_cast<SyncBatchNormImpl>(model->ptr(1));
  ASSERT_TRUE(sync) << "the Sequential's own entry was not replaced";
  EXPECT_TRUE(std::dynamic_pointer_cast<SyncBatchNormImpl>(model->named_children()["1"]));
  EXPECT_TRUE(sync->weight.is_same(weight)) << "the parameter is not the same tensor";
  EXPECT_EQ(sync->running_mean[0].item<float>(), 0.5f);
  EXPECT_FALSE(sync->is_training());
  auto inner_sync = std::dynamic_pointer_cast<SyncBatchNormImpl>(inner->ptr(1));
  ASSERT_TRUE(inner_sync);
  EXPECT_DOUBLE_EQ(inner_sync->options.eps(), 1e-3);
  EXPECT_TRUE(std::dynamic_pointer_cast<SyncBatchNormImpl>(list->ptr(0)));
  std::ostringstream printed;
  printed << *model;
  EXPECT_NE(printed.str().find("xlaunch::SyncBatchNorm(5, eps=0.001"), std::string::npos) << printed.str();
  // The Sequential's forward goes through the new layers: they communicate.
  model->train();
  run_ranks(1, [&](std::shared_ptr<InProcessCommunicator> c) {
    auto counted = std::make_shared<CountingCommunicator>(c);
    EXPECT_EQ(xlaunch::set_sync_batchnorm_communicator(*model, counted), 3);
    model->forward(at::randn({4, 4}));
    EXPECT_EQ(counted->calls, 1);
    inner->forward(at::randn({4, 5}));
    EXPECT_EQ(counted->calls, 2);
  });
}

TEST(ConvertSyncBatchNorm, ABatchNormHeldByAMemberIsRefusedNamingIt) {
  ConvNet net;
  try {
    xlaunch::convert_sync_batchnorm(*net);
    FAIL();
  } catch (const xlaunch::UsageError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("`b1` (torch::nn::BatchNorm2dImpl)"), std::string::npos) << m;
    EXPECT_NE(m.find("Declare that member as xlaunch::SyncBatchNorm"), std::string::npos) << m;
  }
  EXPECT_TRUE(std::dynamic_pointer_cast<torch::nn::BatchNorm2dImpl>(net->named_children()["b1"])) << "half converted";
}

namespace {

torch::nn::Sequential bn_mlp() {
  return torch::nn::Sequential(torch::nn::Linear(4, 6), torch::nn::BatchNorm1d(6), torch::nn::ReLU(),
                               torch::nn::Linear(6, 2));
}

}  // namespace

// Through acc.prepare and acc.backward (the gradient reducer): the gradients of one process on
// the concatenated batch, averaged over the ranks.
TEST(SyncBatchNormAccelerator, PreparedModelEqualsOneProcessOnTheConcatenatedBatch) {
  const std::vector<int64_t> rows{5, 2, 8};
  torch::manual_seed(5);
  auto init = bn_mlp();
  auto all_x = at::randn({15, 4}) + 2.0;
  auto all_dy = at::randn({15, 2});
  auto reference = bn_mlp();
  copy_state(*reference, *init);
  (reference->forward(all_x) * all_dy).sum().backward();
  auto want = reference->named_parameters();
  run_ranks(3, [&](std::shared_ptr<InProcessCommunicator> c) {
    xlaunch::AcceleratorOptions o;
    o.cpu = true;
    o.num_threads = 1;
    o.sync_batchnorm = true;
    xlaunch::Accelerator acc(o, c);
    auto net = bn_mlp();
    copy_state(*net, *init);
    auto model = acc.prepare(net);
    ASSERT_TRUE(std::dynamic_pointer_cast<SyncBatchNormImpl>(net->ptr(1)));
    const int r = c->rank();
    const int64_t first = r == 0 ? 0 : r == 1 ? 5 : 7;
    acc.backward((model(all_x.narrow(0, first, rows[r])) * all_dy.narrow(0, first, rows[r])).sum());
    for (const auto& item : net->named_parameters()) {
      const at::Tensor got = item.value().grad() * 3, expected = want[item.key()].grad();
      // The bias of the Linear before BatchNorm gets 0 (BatchNorm subtracts the mean): both sides are
      // rounding noise, whose size (up to a few 1e-6 here) depends on the CPU's vector width, so
      // both must be small rather than close to each other.
      if (expected.abs().max().item<double>() < 1e-5)
        EXPECT_LT(got.abs().max().item<double>(), 1e-5) << "rank " << r << " " << item.key();
      else
        EXPECT_LT(rel_err(got, expected), 1e-5) << "rank " << r << " " << item.key();
    }
    auto bn = std::dynamic_pointer_cast<SyncBatchNormImpl>(net->ptr(1));
    auto ref_bn = std::dynamic_pointer_cast<torch::nn::BatchNorm1dImpl>(reference->ptr(1));
    EXPECT_LT(rel_err(bn->running_var, ref_bn->running_var), 1e-5);
  });
}

TEST(SyncBatchNormAccelerator, AModelWithoutBatchNormGetsOneWarningNamingTheOption) {
  for (bool option : {true, false}) {
    run_ranks(1, [&](std::shared_ptr<InProcessCommunicator> c) {
      xlaunch::AcceleratorOptions o;
      o.cpu = true;
      o.sync_batchnorm = option;
      xlaunch::Accelerator acc(o, c);
      Mlp mlp;
      testing::internal::CaptureStderr();
      acc.prepare(mlp);
      const std::string err = testing::internal::GetCapturedStderr();
      if (option) {
        EXPECT_NE(err.find("warning: sync_batchnorm is on"), std::string::npos) << err;
        EXPECT_NE(err.find("no BatchNorm1d/2d/3d"), std::string::npos) << err;
      } else {
        EXPECT_EQ(err.find("sync_batchnorm"), std::string::npos) << err;
      }
    });
  }
  run_ranks(1, [&](std::shared_ptr<InProcessCommunicator> c) {
    xlaunch::AcceleratorOptions o;
    o.cpu = true;
    o.sync_batchnorm = true;
    xlaunch::Accelerator acc(o, c);
    auto net = bn_mlp();
    testing::internal::CaptureStderr();
    acc.prepare(net);
    EXPECT_EQ(testing::internal::GetCapturedStderr().find("sync_batchnorm"), std::string::npos);
  });
}

// Declared by the user: acc.prepare hands it the communicator whatever the option says.
TEST(SyncBatchNormAccelerator, ADeclaredSyncBatchNormIsSynchronisedWithoutTheOption) {
  run_ranks(2, [&](std::shared_ptr<InProcessCommunicator> c) {
    xlaunch::AcceleratorOptions o;
    o.cpu = true;
    xlaunch::Accelerator acc(o, c);
    torch::nn::Sequential net(torch::nn::Linear(3, 4), SyncBatchNorm(4));
    acc.prepare(net);
    EXPECT_EQ(std::dynamic_pointer_cast<SyncBatchNormImpl>(net->ptr(1))->communicator(), acc.communicator(at::kCPU));
  });
}
