// The pool's pure parts with literal answers: threads, pinning, chunks, the ring of batches, the
// batch layout; the action and env-id checks; the doorbell.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <thread>

#include "pool_test_envs.h"
#include "rl/doorbell.h"
#include "rl/pool_actions.h"
#include "rl/pool_plan.h"
#include "xlaunch/error.h"

namespace {

using namespace xlaunch::rl::detail;
using xlaunch::UsageError;
using xlaunch::rl::Space;
using xlaunch::test::message_of;

TEST(PoolPlan, DefaultThreads) {
  EXPECT_EQ(default_num_threads(2, 1, 64), 2);
  EXPECT_EQ(default_num_threads(2, 2, 64), 1);
  EXPECT_EQ(default_num_threads(16, 4, 64), 4);
  EXPECT_EQ(default_num_threads(16, 1, 3), 3);   // at most one per environment
  EXPECT_EQ(default_num_threads(2, 4, 64), 1);   // at least one
  EXPECT_EQ(default_num_threads(0, 1, 8), 1);
}

TEST(PoolPlan, PinnedCores) {
  EXPECT_EQ(pinned_core_index(0, 0, 2), 0);
  EXPECT_EQ(pinned_core_index(0, 1, 2), 1);
  EXPECT_EQ(pinned_core_index(1, 1, 2), 0);
  EXPECT_EQ(pinned_core_index(3, 0, 4), 3);
  EXPECT_EQ(pinned_core_index(5, 2, 4), 3);
}

TEST(PoolPlan, SplitEnvs) {
  EXPECT_EQ(split_envs(8, 1), (std::vector<Chunk>{{0, 8}}));
  EXPECT_EQ(split_envs(7, 3), (std::vector<Chunk>{{0, 3}, {3, 5}, {5, 7}}));
  EXPECT_EQ(split_envs(8, 2), (std::vector<Chunk>{{0, 4}, {4, 8}}));
  EXPECT_EQ(split_envs(4, 4), (std::vector<Chunk>{{0, 1}, {1, 2}, {2, 3}, {3, 4}}));
  EXPECT_EQ(split_envs(256, 3), (std::vector<Chunk>{{0, 86}, {86, 171}, {171, 256}}));
}

TEST(PoolPlan, AsyncBatches) {
  EXPECT_EQ(async_batches(8, 8), 1);
  EXPECT_EQ(async_batches(8, 4), 2);
  EXPECT_EQ(async_batches(8, 3), 3);
  EXPECT_EQ(async_batches(8, 1), 8);
}

TEST(PoolPlan, BatchLayout) {
  BatchLayout l = batch_layout(3, 4, false);  // obs 48 bytes, reward 12, flags 3 + 3, ids 24
  EXPECT_EQ(l.obs, 0);
  EXPECT_EQ(l.reward, 64);
  EXPECT_EQ(l.terminated, 128);
  EXPECT_EQ(l.truncated, 192);
  EXPECT_EQ(l.env_id, 256);
  EXPECT_EQ(l.final_obs, -1);
  EXPECT_EQ(l.bytes, 320);
  l = batch_layout(32, 4, true);  // obs 512, reward 128, flags 32 + 32, ids 256, final 512
  EXPECT_EQ(l.reward, 512);
  EXPECT_EQ(l.terminated, 640);
  EXPECT_EQ(l.truncated, 704);
  EXPECT_EQ(l.env_id, 768);
  EXPECT_EQ(l.final_obs, 1024);
  EXPECT_EQ(l.bytes, 1536);
}

std::string env_name(int64_t env) { return "environment " + std::to_string(env); }

TEST(PoolActions, DiscreteActionsGoToTheirEnvironments) {
  const Space space = Space::discrete(4);
  ActionSlots slots(space, 5);
  const int64_t ids[] = {3, 0, 4};
  store_actions(space, torch::tensor({1, 3, 2}, torch::kByte), ids, 3, "call", env_name, slots);
  EXPECT_EQ(slots.discrete, (std::vector<int64_t>{3, 0, 0, 1, 2}));
  store_actions(space, torch::tensor({0, 1, 2}, torch::kInt).view({3, 1}), ids, 3, "call", env_name, slots);
  EXPECT_EQ(slots.discrete, (std::vector<int64_t>{1, 0, 0, 0, 2}));
  EXPECT_EQ(slots.of(4).discrete, 2);
  // A bad value stores nothing.
  const std::string m = message_of<UsageError>(
      [&] { store_actions(space, torch::tensor({3, 4, 0}, torch::kLong), ids, 3, "call", env_name, slots); });
  EXPECT_EQ(m, "call: the action of environment 0 (row 1) is 4, outside Discrete(4): expected 0..3");
  EXPECT_EQ(slots.discrete, (std::vector<int64_t>{1, 0, 0, 0, 2}));
  EXPECT_EQ(message_of<UsageError>(
                [&] { store_actions(space, torch::zeros({3}, torch::kBool), ids, 3, "call", env_name, slots); }),
            "call: got actions of shape [3] and dtype Bool for 3 environments (the first: environment 3); expected "
            "an integer tensor of shape [3] or [3, 1], one action in 0..3 per environment, for the action space "
            "Discrete(4)");
}

TEST(PoolActions, BoxActionsAreConvertedToFloat) {
  const Space space = Space::box({-1, -1, -1}, {1, 1, 1});
  ActionSlots slots(space, 3);
  const int64_t ids[] = {2, 0};
  store_actions(space, torch::tensor({0.5, -0.25, 3.0, 1.0, 2.0, -7.5}, torch::kDouble).view({2, 3}), ids, 2, "call",
                env_name, slots);
  EXPECT_EQ(slots.box, (std::vector<float>{1, 2, -7.5, 0, 0, 0, 0.5, -0.25, 3}));
  EXPECT_EQ(slots.of(2).box, slots.box.data() + 6);
  EXPECT_EQ(message_of<UsageError>([&] {
              store_actions(space, torch::zeros({2, 2}, torch::kFloat), ids, 2, "call", env_name, slots);
            }),
            "call: got actions of shape [2, 2] and dtype Float for 2 environments (the first: environment 2); "
            "expected a float32 or float64 tensor of shape [2, 3], one action of shape [3] per environment, for the "
            "action space " + space.describe());
  at::Tensor a = torch::zeros({2, 3}, torch::kFloat);
  a[1][2] = -INFINITY;
  EXPECT_EQ(message_of<UsageError>([&] { store_actions(space, a, ids, 2, "call", env_name, slots); }),
            "call: the action of environment 0 (row 1) holds -inf at element 2: actions of " + space.describe() +
                " must be finite");
}

TEST(PoolActions, SendIds) {
  std::vector<uint8_t> in_flight{0, 1, 0, 0}, seen(4, 0);
  const int64_t ok[] = {3, 0, 2};
  check_send_ids(ok, 3, 4, in_flight, "send", env_name, seen);
  EXPECT_EQ(seen, std::vector<uint8_t>(4, 0));
  const int64_t twice[] = {2, 3, 2};
  EXPECT_EQ(message_of<UsageError>([&] { check_send_ids(twice, 3, 4, in_flight, "send", env_name, seen); }),
            "send: environment 2 appears twice in env_ids (the second time in row 2): each environment steps at most "
            "once per send()");
  EXPECT_EQ(seen, std::vector<uint8_t>(4, 0));
  const int64_t busy[] = {0, 1};
  EXPECT_EQ(message_of<UsageError>([&] { check_send_ids(busy, 2, 4, in_flight, "send", env_name, seen); }),
            "send: environment 1 is already in flight (sent, and not yet returned by recv()): send an environment "
            "again only after recv() has returned it");
  const int64_t unknown[] = {0, -1};
  EXPECT_EQ(message_of<UsageError>([&] { check_send_ids(unknown, 2, 4, in_flight, "send", env_name, seen); }),
            "send: env_ids[1] is -1, not an environment of this pool: expected 0..3");
  EXPECT_EQ(seen, std::vector<uint8_t>(4, 0));
}

TEST(PoolDoorbell, WaitReturnsOnARingAndAtTheDeadline) {
  Doorbell bell;
  const uint64_t seen = bell.seq();
  EXPECT_FALSE(bell.wait(seen, Doorbell::Clock::now())) << "nobody rang: the deadline";
  bell.ring();
  EXPECT_TRUE(bell.wait(seen, Doorbell::Clock::now())) << "rung since `seen`";
  // A sleeper is woken by a ring from another thread (the deadline is a minute away).
  for (int i = 0; i < 20; ++i) {
    const uint64_t s = bell.seq();
    std::thread ringer([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(i % 4));
      bell.ring();
    });
    EXPECT_TRUE(bell.wait(s, Doorbell::Clock::now() + std::chrono::seconds(60)));
    ringer.join();
  }
}

}  // namespace
