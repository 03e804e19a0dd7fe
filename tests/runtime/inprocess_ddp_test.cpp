// The communicator contract and the reducer with ranks as threads of one process
// (InProcessCommunicator): no mpirun needed, and failures can be injected.
#include <gtest/gtest.h>

#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>

#include <map>
#include <thread>

#include "inprocess_ranks.h"
#include "models.h"
#include "xlaunch/accelerator.h"
#include "xlaunch/error.h"
#include "comm/inprocess_communicator.h"

using xlaunch::InProcessCommunicator;
using xlaunch::InProcessGroup;
using xlaunch::ReduceOp;

using namespace xlaunch::test;

TEST(InProcess, CollectivesOnThreeRanks) {
  run_ranks(3, [](std::shared_ptr<InProcessCommunicator> c) {
    const int r = c->rank();
    at::Tensor t = at::full({4}, static_cast<float>(r + 1));
    c->allreduce(t, ReduceOp::Sum);
    EXPECT_TRUE(t.eq(6.0f).all().item<bool>());
    c->allreduce(t, ReduceOp::Avg);
    EXPECT_TRUE(t.eq(6.0f).all().item<bool>());
    at::Tensor b = at::full({2}, static_cast<double>(r * 10), at::kDouble);
    c->broadcast(b, 2);
    EXPECT_TRUE(b.eq(20.0).all().item<bool>());
    at::Tensor g = c->allgather(at::full({1}, static_cast<int64_t>(r), at::kLong));
    EXPECT_EQ(g.view(-1)[2].item<int64_t>(), 2);
    EXPECT_EQ(c->allgather_strings(std::string(r, 'x'))[2], "xx");
    c->barrier();
  });
}

TEST(InProcess, WorldOfOneReturnsAtOnce) {
  run_ranks(1, [](std::shared_ptr<InProcessCommunicator> c) {
    at::Tensor t = at::full({3}, 5.0f);
    auto w = c->allreduce_async(t, ReduceOp::Avg);
    w->wait();
    EXPECT_TRUE(t.eq(5.0f).all().item<bool>());
  });
}

TEST(InProcess, InjectedFailureSurfacesAsCommError) {
  auto group = std::make_shared<InProcessGroup>(1);
  auto c = std::make_shared<InProcessCommunicator>(group, 0);
  // A world of one never reaches the rendezvous; use two ranks where rank 0 fails its first op.
  auto group2 = std::make_shared<InProcessGroup>(2);
  auto c0 = std::make_shared<InProcessCommunicator>(group2, 0);
  c0->fail_at(0);
  at::Tensor t = at::zeros({2});
  try {
    c0->allreduce(t, ReduceOp::Sum);
    FAIL();
  } catch (const xlaunch::CommError& e) {
    EXPECT_NE(std::string(e.what()).find("injected"), std::string::npos);
  }
}

TEST(InProcess, ReducerAveragesGradientsLikeOneProcess) {
  torch::manual_seed(11);
  Mlp init;
  std::vector<Mlp> models(2);
  run_ranks(2, [&](std::shared_ptr<InProcessCommunicator> c) {
    xlaunch::AcceleratorOptions o;
    o.cpu = true;
    o.ddp.first_bucket_bytes = 64;
    o.ddp.bucket_cap_mb = 0.002;
    xlaunch::Accelerator acc(o, c);
    Mlp mlp;
    copy_state(*mlp, *init);
    auto model = acc.prepare(mlp);
    EXPECT_GE(acc.reducer(0).buckets().size(), 3u);
    std::vector<size_t> launched;
    acc.reducer(0).set_launch_observer([&](size_t b) { launched.push_back(b); });
    const auto mine = mlp_batch(c->rank(), 0);
    acc.backward(loss_of(model(mine.x), mine.y));
    // Buckets start in index order on every rank.
    for (size_t k = 0; k < launched.size(); ++k) EXPECT_EQ(launched[k], k);
    models[c->rank()] = mlp;
  });
  Mlp reference;
  copy_state(*reference, *init);
  const auto all = concat({mlp_batch(0, 0), mlp_batch(1, 0)});
  loss_of(reference(all.x), all.y).backward();
  auto ref = reference->named_parameters();
  for (int r = 0; r < 2; ++r)
    for (const auto& item : models[r]->named_parameters())
      EXPECT_LT(rel_err(item.value().grad(), ref[item.key()].grad()), 1e-5) << r << " " << item.key();
}

TEST(InProcess, PlainLossBackwardOnAPreparedModelIsRefused) {
  run_ranks(1, [](std::shared_ptr<InProcessCommunicator> c) {
    xlaunch::AcceleratorOptions o;
    o.cpu = true;
    xlaunch::Accelerator acc(o, c);
    Mlp mlp;
    auto model = acc.prepare(mlp);
    const auto b = mlp_batch(0, 0);
    try {
      loss_of(model(b.x), b.y).backward();
      FAIL();
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("acc.backward(loss)"), std::string::npos) << e.what();
    }
  });
}

// A world of one reduces nothing: autograd's fresh gradients are not copied into the buckets
// (a pass over every gradient that cost 3% of a large MLP's step on an H200), and the results,
// accumulation and the control element are as before. With two ranks they are copied.
TEST(InProcess, AWorldOfOneLeavesGradientsWhereAutogradPutThem) {
  for (int world : {1, 2}) {
    torch::manual_seed(3);
    Mlp init;
    std::vector<Mlp> models(world);
    run_ranks(world, [&](std::shared_ptr<InProcessCommunicator> c) {
      xlaunch::AcceleratorOptions o;
      o.cpu = true;
      o.ddp.bucket_cap_mb = 0.002;
      xlaunch::Accelerator acc(o, c);
      Mlp mlp;
      copy_state(*mlp, *init);
      auto model = acc.prepare(mlp);
      std::map<std::string, const void*> slot;
      for (const auto& p : mlp->named_parameters()) slot[p.key()] = p.value().grad().data_ptr();
      for (const auto& p : mlp->parameters()) p.mutable_grad().reset();  // zero_grad(set_to_none)
      const auto mine = mlp_batch(c->rank(), 0);
      acc.reducer(0).set_control_bit(true);
      acc.backward(loss_of(model(mine.x), mine.y));
      EXPECT_EQ(acc.reducer(0).control_raised_at(), 1) << "world " << world;
      for (const auto& p : mlp->named_parameters()) {
        if (world == 1) EXPECT_NE(p.value().grad().data_ptr(), slot[p.key()]) << p.key() << " was copied";
        else EXPECT_EQ(p.value().grad().data_ptr(), slot[p.key()]) << p.key() << " is not in its bucket";
      }
      // A second backward accumulates into whatever gradient there is.
      acc.backward(loss_of(model(mine.x), mine.y));
      models[c->rank()] = mlp;
    });
    Mlp reference;
    copy_state(*reference, *init);
    std::vector<Batch> batches;
    for (int r = 0; r < world; ++r) batches.push_back(mlp_batch(r, 0));
    const auto all = concat(batches);
    for (int k = 0; k < 2; ++k) loss_of(reference(all.x), all.y).backward();
    auto ref = reference->named_parameters();
    for (const auto& item : models[0]->named_parameters())
      EXPECT_LT(rel_err(item.value().grad(), ref[item.key()].grad()), 1e-5) << "world " << world << " " << item.key();
  }
}
