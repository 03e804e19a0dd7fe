// The shared gradient pool and the capturing CPU allocator, on plain (private) memory.
#include <gtest/gtest.h>

#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/ones.h>
#include <torch/autograd.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/functional/loss.h>

#include <sys/mman.h>

#include <thread>

#include "ddp/grad_capture.h"

using xlaunch::GradCapture;
using xlaunch::SharedPool;

namespace {

// A pool over a fresh anonymous mapping; `released` is set when the pool gives it back.
SharedPool* make_pool(size_t bytes, bool* released) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  EXPECT_NE(p, MAP_FAILED);
  return SharedPool::create(static_cast<char*>(p), bytes, [released](char* base, size_t n) {
    munmap(base, n);
    *released = true;
  });
}

bool in_pool(const SharedPool* pool, const at::Tensor& t) { return pool->contains(t.data_ptr(), t.nbytes()); }

}  // namespace

TEST(SharedPool, FirstFitWithCoalescingAndNoRoomIsEmpty) {
  bool released = false;
  SharedPool* pool = make_pool(4096, &released);
  c10::DataPtr a = pool->allocate(1000);  // rounded to 1024
  c10::DataPtr b = pool->allocate(1024);
  c10::DataPtr c = pool->allocate(2048);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(static_cast<char*>(b.get()) - static_cast<char*>(a.get()), 1024);
  EXPECT_EQ(pool->in_use(), 4096u);
  EXPECT_FALSE(pool->allocate(1)) << "a full pool hands out nothing";
  a.clear();
  b.clear();  // the two freed neighbours merge into one 2048-byte hole
  c10::DataPtr d = pool->allocate(2048);
  ASSERT_TRUE(d);
  EXPECT_EQ(pool->in_use(), 4096u);
  d.clear();
  c.clear();
  EXPECT_EQ(pool->in_use(), 0u);
  c10::DataPtr whole = pool->allocate(4096);
  EXPECT_TRUE(whole) << "every hole merged back into one";
  whole.clear();
  EXPECT_FALSE(released);
  pool->close();
  EXPECT_TRUE(released);
}

TEST(SharedPool, BlocksOutliveTheClosedPool) {
  bool released = false;
  SharedPool* pool = make_pool(1 << 16, &released);
  c10::DataPtr block = pool->allocate(100);
  static_cast<float*>(block.get())[0] = 42.0f;
  pool->close();
  EXPECT_FALSE(released) << "a live block keeps the region mapped";
  EXPECT_EQ(static_cast<float*>(block.get())[0], 42.0f);
  block.clear();
  EXPECT_TRUE(released);
}

TEST(GradCapture, ServesOnlyItsSizesOnItsThreadWhileAlive) {
  bool released = false;
  SharedPool* pool = make_pool(1 << 20, &released);
  {
    GradCapture capture({64 * sizeof(float)}, {pool});
    ASSERT_TRUE(GradCapture::active()) << "the capturing allocator is the CPU allocator";
    at::Tensor hit = at::empty({8, 8});
    at::Tensor other_size = at::empty({65});
    EXPECT_TRUE(in_pool(pool, hit));
    EXPECT_FALSE(in_pool(pool, other_size));
    at::Tensor from_thread;
    std::thread([&] { from_thread = at::empty({64}); }).join();
    EXPECT_FALSE(in_pool(pool, from_thread)) << "another thread's allocation was captured";
    hit.fill_(1.0f);
    EXPECT_EQ(hit.sum().item<float>(), 64.0f);
  }
  at::Tensor after = at::empty({64});
  EXPECT_FALSE(in_pool(pool, after)) << "captured after the GradCapture was destroyed";
  EXPECT_EQ(pool->in_use(), 0u);
  pool->close();
  EXPECT_TRUE(released);
}

TEST(GradCapture, FullPoolFallsBackToTheCpuAllocator) {
  bool released = false;
  SharedPool* pool = make_pool(4096, &released);
  GradCapture capture({4096}, {pool});
  at::Tensor first = at::empty({1024});
  at::Tensor second = at::empty({1024});
  EXPECT_TRUE(in_pool(pool, first));
  EXPECT_FALSE(in_pool(pool, second));
  second.fill_(2.0f);
  EXPECT_EQ(second.sum().item<float>(), 2048.0f);
  first.reset();
  pool->close();
  EXPECT_TRUE(released);
}

// The point of it all: a fresh weight gradient made by backward lands in the pool.
TEST(GradCapture, BackwardWritesTheWeightGradientIntoThePool) {
  bool released = false;
  SharedPool* pool = make_pool(1 << 20, &released);
  torch::nn::Linear fc(30, 20);
  at::Tensor x = at::ones({5, 30});
  {
    GradCapture capture({fc->weight.nbytes(), fc->bias.nbytes()}, {pool});
    fc(x).sum().backward();
  }
  EXPECT_TRUE(in_pool(pool, fc->weight.grad()));
  EXPECT_TRUE(in_pool(pool, fc->bias.grad()));
  EXPECT_TRUE(fc->weight.grad().allclose(at::full({20, 30}, 5.0f)));
  EXPECT_TRUE(fc->bias.grad().allclose(at::full({20}, 5.0f)));
  fc->weight.mutable_grad().reset();
  fc->bias.mutable_grad().reset();
  pool->close();
  EXPECT_TRUE(released);
}

TEST(GradCapture, DestroyedOnAnotherThreadStopsCapturingWithoutHarm) {
  bool released = false;
  SharedPool* pool = make_pool(1 << 16, &released);
  auto capture = std::make_unique<GradCapture>(std::vector<size_t>{256}, std::vector<SharedPool*>{pool});
  EXPECT_TRUE(in_pool(pool, at::empty({64})));
  std::thread([&] { capture.reset(); }).join();
  EXPECT_FALSE(in_pool(pool, at::empty({64}))) << "a destroyed capture still served this thread";
  pool->close();
  EXPECT_TRUE(released);
}
