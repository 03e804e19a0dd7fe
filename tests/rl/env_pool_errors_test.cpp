// The pool's bad input (issue 27, part 4): every UsageError names the environment, its id, its step
// and what was expected, and leaves the pool usable; an environment that throws fails the pool; a
// stuck environment hits the timeout; the threads never outlive the pool.
#include <dirent.h>
#include <unistd.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <torch/torch.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "pool_test_envs.h"
#include "xlaunch/error.h"
#include "xlaunch/rl/env_pool.h"

namespace {

using namespace xlaunch::test;
using xlaunch::Error;
using xlaunch::UsageError;
using xlaunch::rl::EnvBatch;
using xlaunch::rl::EnvPool;
using xlaunch::rl::EnvPoolOptions;

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << "missing '" << (part) << "' in: " << (text)

EnvPoolOptions walk(int64_t n, int64_t batch = 0, int threads = 2) {
  EnvPoolOptions o;
  o.factory = [] { return std::make_unique<WalkEnv>(); };
  o.num_envs = n;
  o.batch_size = batch;
  o.num_threads = threads;
  return o;
}

EnvPoolOptions drift(int64_t n) {
  EnvPoolOptions o;
  o.factory = [] { return std::make_unique<DriftEnv>(); };
  o.num_envs = n;
  o.num_threads = 2;
  return o;
}

int thread_count() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') ++n;
    closedir(d);
  }
  return n;
}

// Joined threads leave /proc/self/task a moment after pthread_join returns: poll briefly.
int settled_thread_count(int expected) {
  int n = thread_count();
  for (int i = 0; i < 200 && n != expected; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    n = thread_count();
  }
  return n;
}

TEST(EnvPoolErrors, DiscreteActionsOfTheWrongShapeDtypeOrRange) {
  EnvPool pool(walk(4));
  pool.reset();
  pool.step(torch::zeros({4}, torch::kLong));  // every environment at its step 1

  std::string m = message_of<UsageError>([&] { pool.step(torch::zeros({4}, torch::kFloat)); });
  EXPECT_HAS(m, "EnvPool(Walk-v0).step()");
  EXPECT_HAS(m, "shape [4] and dtype Float");
  EXPECT_HAS(m, "environment 0 (Walk-v0, its step 1)");
  EXPECT_HAS(m, "expected an integer tensor of shape [4] or [4, 1], one action in 0..2 per environment");
  EXPECT_HAS(m, "Discrete(3)");

  m = message_of<UsageError>([&] { pool.step(torch::zeros({4, 2}, torch::kLong)); });
  EXPECT_HAS(m, "shape [4, 2] and dtype Long");
  m = message_of<UsageError>([&] { pool.step(torch::zeros({3}, torch::kLong)); });
  EXPECT_HAS(m, "shape [3]");
  EXPECT_HAS(m, "[4] or [4, 1]");

  m = message_of<UsageError>([&] { pool.step(torch::tensor({0, 1, 3, 2}, torch::kLong)); });
  EXPECT_HAS(m, "the action of environment 2 (Walk-v0, its step 1) (row 2) is 3, outside Discrete(3): expected 0..2");
  m = message_of<UsageError>([&] { pool.step(torch::tensor({0, -1, 1, 2}, torch::kInt).view({4, 1})); });
  EXPECT_HAS(m, "environment 1 (Walk-v0, its step 1) (row 1) is -1");

  // Nothing stepped: the pool goes on from where it was.
  pool.step(torch::zeros({4}, torch::kLong));
  EXPECT_EQ(pool.env_steps(), 8);
}

TEST(EnvPoolErrors, BoxActionsOfTheWrongShapeDtypeOrNotFinite) {
  EnvPool pool(drift(3));
  pool.reset();
  std::string m = message_of<UsageError>([&] { pool.step(torch::zeros({3}, torch::kFloat)); });
  EXPECT_HAS(m, "EnvPool(Drift-v0).step(): got actions of shape [3] and dtype Float");
  EXPECT_HAS(m, "expected a float32 or float64 tensor of shape [3, 2], one action of shape [2] per environment");
  m = message_of<UsageError>([&] { pool.step(torch::zeros({3, 2}, torch::kInt)); });
  EXPECT_HAS(m, "dtype Int");
  at::Tensor a = torch::zeros({3, 2}, torch::kFloat);
  a[1][1] = NAN;
  m = message_of<UsageError>([&] { pool.step(a); });
  EXPECT_HAS(m, "the action of environment 1 (Drift-v0, its step 0) (row 1) holds nan at element 1");
  EXPECT_HAS(m, "must be finite");
  a[1][1] = INFINITY;
  m = message_of<UsageError>([&] { pool.step(a.to(torch::kDouble)); });
  EXPECT_HAS(m, "holds inf at element 1");
  pool.step(torch::zeros({3, 2}, torch::kDouble));
  EXPECT_EQ(pool.env_steps(), 3);
}

TEST(EnvPoolErrors, SendAndRecvMistakes) {
  EnvPool pool(walk(4, 2));
  std::string m = message_of<UsageError>([&] { pool.recv(); });
  EXPECT_HAS(m, "EnvPool(Walk-v0).recv(): 0 environments are in flight, fewer than batch_size 2");
  EXPECT_HAS(m, "environments not in flight: 0, 1, 2, 3");
  EXPECT_HAS(m, "async_reset()");
  m = message_of<UsageError>([&] { pool.send(torch::zeros({1}, torch::kLong), torch::tensor({0}, torch::kLong)); });
  EXPECT_HAS(m, "send(): no environment has started an episode yet: call reset() (or async_reset()) first");

  pool.async_reset();
  EnvBatch b = pool.recv();
  EnvBatch c = pool.recv();
  const int64_t first = b.env_id[0].item<int64_t>(), second = b.env_id[1].item<int64_t>();
  pool.send(torch::zeros({2}, torch::kLong), b.env_id);

  m = message_of<UsageError>([&] { pool.send(torch::zeros({1}, torch::kLong), torch::tensor({first}, torch::kLong)); });
  EXPECT_HAS(m, "send(): environment " + std::to_string(first) + " (Walk-v0, its step ");  // 0 or 1: in flight
  EXPECT_HAS(m, ") is already in flight (sent, and not yet returned by recv())");
  m = message_of<UsageError>([&] { pool.send(torch::zeros({1}, torch::kLong), torch::tensor({4}, torch::kLong)); });
  EXPECT_HAS(m, "env_ids[0] is 4, not an environment of this pool: expected 0..3");
  const int64_t third = c.env_id[0].item<int64_t>();
  m = message_of<UsageError>(
      [&] { pool.send(torch::zeros({2}, torch::kLong), torch::tensor({third, third}, torch::kLong)); });
  EXPECT_HAS(m, "environment " + std::to_string(third) + " (Walk-v0, its step 0) appears twice in env_ids");
  m = message_of<UsageError>([&] { pool.send(torch::zeros({1}, torch::kLong), c.env_id.to(torch::kInt)); });
  EXPECT_HAS(m, "env_ids has dtype Int and 1 dimensions; expected an int64 tensor of shape [K]");
  m = message_of<UsageError>([&] { pool.send(torch::full({2}, 7, torch::kLong), c.env_id); });
  EXPECT_HAS(m, "is 7, outside Discrete(3)");

  // The failed sends changed nothing: two environments in flight, one batch to receive.
  m = message_of<UsageError>([&] { pool.step(torch::zeros({4}, torch::kLong)); });
  EXPECT_HAS(m, "step(): this pool is asynchronous (batch_size 2 of 4 environments): use async_reset(), send() and recv()");
  m = message_of<UsageError>([&] { pool.reset(); });
  EXPECT_HAS(m, "reset(): this pool is asynchronous");
  b = pool.recv();
  EXPECT_EQ(b.env_id[0].item<int64_t>() + b.env_id[1].item<int64_t>(), first + second);
  m = message_of<UsageError>([&] { pool.recv(); });
  EXPECT_HAS(m, "recv(): 0 environments are in flight");
  pool.send(torch::zeros({1}, torch::kLong), torch::tensor({first}, torch::kLong));
  m = message_of<UsageError>([&] { pool.recv(); });
  EXPECT_HAS(m, "1 environments are in flight, fewer than batch_size 2, so no batch can complete: send() actions for at least 1 more");
  m = message_of<UsageError>([&] { pool.async_reset(); });
  EXPECT_HAS(m, "async_reset(): 1 environments are in flight");
  EXPECT_EQ(pool.env_steps(), 2);
}

TEST(EnvPoolErrors, SynchronousCallsWithEnvironmentsInFlight) {
  EnvPool pool(walk(3));
  std::string m = message_of<UsageError>([&] { pool.step(torch::zeros({3}, torch::kLong)); });
  EXPECT_HAS(m, "step(): no environment has started an episode yet: call reset()");
  pool.async_reset();
  m = message_of<UsageError>([&] { pool.step(torch::zeros({3}, torch::kLong)); });
  EXPECT_HAS(m, "step(): 3 environments are in flight (sent, not yet returned by recv()): recv() them");
  pool.recv();
  pool.step(torch::zeros({3}, torch::kLong));
}

TEST(EnvPoolErrors, BadOptions) {
  EnvPoolOptions o;
  EXPECT_HAS(message_of<UsageError>([&] { EnvPool p(o); }), "names no environment: set env_id");
  o = walk(2);
  o.env_id = "CartPole-v1";
  EXPECT_HAS(message_of<UsageError>([&] { EnvPool p(o); }), "sets both env_id ('CartPole-v1') and factory");
  o = walk(0);
  EXPECT_HAS(message_of<UsageError>([&] { EnvPool p(o); }), "num_envs is 0; it must be at least 1");
  o = walk(4, 5);
  EXPECT_HAS(message_of<UsageError>([&] { EnvPool p(o); }), "batch_size is 5 for 4 environments");
  o = walk(4);
  o.timeout_s = -1;
  EXPECT_HAS(message_of<UsageError>([&] { EnvPool p(o); }), "timeout_s is -1");
  o = walk(4);
  int made = 0;
  o.factory = [&made]() -> std::unique_ptr<xlaunch::rl::Env> {
    if (made++ == 2) return std::make_unique<DriftEnv>();
    return std::make_unique<WalkEnv>();
  };
  EXPECT_HAS(message_of<UsageError>([&] { EnvPool p(o); }), "environment 2 (Drift-v0");
  o = walk(2);
  o.factory = [] { return std::unique_ptr<xlaunch::rl::Env>(); };
  EXPECT_HAS(message_of<UsageError>([&] { EnvPool p(o); }), "the factory returned no environment");
  o = EnvPoolOptions();
  o.env_id = "NoSuchEnv-v9";
  EXPECT_THROW(EnvPool p(o), UsageError) << "make_env's error (env.h)";
  o = walk(2);
  o.num_threads = 8;
  EXPECT_EQ(EnvPool(o).num_threads(), 2) << "at most one thread per environment";
}

// Throws at its 5th step when it is environment `bad` (the factory numbers them).
class ThrowingEnv : public WalkEnv {
 public:
  explicit ThrowingEnv(bool bad) : bad_(bad) {}
  xlaunch::rl::StepResult step(const Action& a, Rng& rng, float* obs) override {
    if (bad_ && ++steps_ == 5) throw std::runtime_error("boom on purpose");
    return WalkEnv::step(a, rng, obs);
  }

 private:
  bool bad_;
  int steps_ = 0;
};

EnvPoolOptions throwing(int64_t n, int64_t bad, int64_t batch) {
  EnvPoolOptions o = walk(n, batch);
  auto made = std::make_shared<int64_t>(0);
  o.factory = [made, bad] { return std::make_unique<ThrowingEnv>((*made)++ == bad); };
  return o;
}

TEST(EnvPoolErrors, AnEnvironmentThatThrowsFailsThePool) {
  const int before = thread_count();
  {
    EnvPool pool(throwing(4, 3, 0));  // environment 3: worker 0's chunk [2, 4)
    pool.reset();
    // Its 5th call of step() throws: not in the first 4 pool steps, and within 10 more (NextStep's
    // reset steps after an episode's end do not call step()).
    for (int t = 0; t < 4; ++t) pool.step(torch::zeros({4}, torch::kLong));
    std::string m;
    for (int t = 0; t < 10 && m.empty(); ++t) {
      try {
        pool.step(torch::zeros({4}, torch::kLong));
      } catch (const UsageError&) {
        ADD_FAILURE() << "a throwing environment is no usage error";
      } catch (const Error& e) {
        m = e.what();
      }
    }
    EXPECT_HAS(m, "EnvPool(Walk-v0): environment 3 of 4 threw in step() at its step");
    EXPECT_HAS(m, "boom on purpose");
    EXPECT_HAS(m, "The pool cannot continue");
    // Every later call throws the same error.
    EXPECT_EQ(message_of<Error>([&] { pool.step(torch::zeros({4}, torch::kLong)); }), m);
    EXPECT_EQ(message_of<Error>([&] { pool.reset(); }), m);
    EXPECT_EQ(message_of<Error>([&] { pool.async_reset(); }), m);
  }
  {
    EnvPool pool(throwing(6, 1, 2));
    pool.async_reset();
    std::string m;
    for (int t = 0; t < 60 && m.empty(); ++t) {
      try {
        const EnvBatch b = pool.recv();
        pool.send(torch::zeros({2}, torch::kLong), b.env_id);
      } catch (const Error& e) {
        m = e.what();
      }
    }
    EXPECT_HAS(m, "environment 1 of 6 threw in step() at its step");
    EXPECT_HAS(m, "boom on purpose");
    EXPECT_EQ(message_of<Error>([&] { pool.recv(); }), m);
  }
  EXPECT_EQ(settled_thread_count(before), before) << "the pools' threads are joined";
}

// A gate the test opens: a GateEnv's step waits for it (at most a minute, so a broken test ends).
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  void release() {
    {
      std::lock_guard<std::mutex> lk(mu);
      open = true;
    }
    cv.notify_all();
  }
};

// Environment `stuck` blocks in its first step until the gate opens: far longer than the timeout.
EnvPoolOptions gated(int64_t n, int64_t stuck, int64_t batch, std::shared_ptr<Gate> gate) {
  class GateEnv : public WalkEnv {
   public:
    explicit GateEnv(std::shared_ptr<Gate> g) : gate_(std::move(g)) {}
    xlaunch::rl::StepResult step(const Action& a, Rng& rng, float* obs) override {
      if (gate_) {
        std::unique_lock<std::mutex> lk(gate_->mu);
        gate_->cv.wait_for(lk, std::chrono::seconds(60), [&] { return gate_->open; });
      }
      return WalkEnv::step(a, rng, obs);
    }

   private:
    std::shared_ptr<Gate> gate_;
  };
  EnvPoolOptions o = walk(n, batch);
  o.timeout_s = 2;  // long enough for the other environments to finish and the stuck one to start on a busy machine
  auto made = std::make_shared<int64_t>(0);
  o.factory = [made, stuck, gate] { return std::make_unique<GateEnv>((*made)++ == stuck ? gate : nullptr); };
  return o;
}

TEST(EnvPoolErrors, AStuckEnvironmentHitsTheTimeout) {
  {
    auto gate = std::make_shared<Gate>();
    EnvPool pool(gated(2, 1, 0, gate));  // environment 1 is worker 0's: the caller steps environment 0
    pool.reset();
    const std::string m = message_of<Error>([&] { pool.step(torch::zeros({2}, torch::kLong)); });
    gate->release();
    EXPECT_HAS(m, "EnvPool(Walk-v0).step() waited");
    EXPECT_HAS(m, "the last 2 s (timeout_s, or XLAUNCH_TIMEOUT_S) without any environment finishing");
    EXPECT_HAS(m, "environments stepping: 1 (its step 1)");
    EXPECT_EQ(message_of<Error>([&] { pool.step(torch::zeros({2}, torch::kLong)); }), m);
  }
  {
    auto gate = std::make_shared<Gate>();
    EnvPool pool(gated(3, 1, 3, gate));
    pool.async_reset();
    pool.send(torch::zeros({3}, torch::kLong), pool.recv().env_id);
    const std::string m = message_of<Error>([&] { pool.recv(); });
    gate->release();
    EXPECT_HAS(m, "EnvPool(Walk-v0).recv() waited");
    EXPECT_HAS(m, "environments stepping: 1 (its step 1)");
    EXPECT_HAS(m, "finished, waiting for the rest of the batch: 0 (its step 1), 2 (its step 1)");
  }
}

// Destroying a pool whose environment is stuck waits for it (a thread cannot be stopped from
// outside), but says so after timeout_s, naming the environment. The gate opens only once the
// message has arrived on stderr (a pipe read by another thread): no timing in the test.
TEST(EnvPoolErrors, DestroyingAPoolWithAStuckEnvironmentSaysWhatItWaitsFor) {
  auto gate = std::make_shared<Gate>();
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const int saved = dup(2);
  ASSERT_EQ(dup2(fds[1], 2), 2);
  close(fds[1]);
  std::string said;
  std::thread reader([&] {
    char buf[512];
    for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) {
      said.append(buf, static_cast<size_t>(n));
      if (said.find("goes on waiting") != std::string::npos) gate->release();
    }
    gate->release();  // stderr closed without the message: let the pool go, the test then fails
  });
  {
    EnvPool pool(gated(2, 1, 0, gate));
    pool.reset();
    message_of<Error>([&] { pool.step(torch::zeros({2}, torch::kLong)); });  // the timeout
  }
  dup2(saved, 2);  // closes the pipe's last write end: the reader ends
  close(saved);
  reader.join();
  close(fds[0]);
  EXPECT_HAS(said, "EnvPool(Walk-v0) is being destroyed and its threads have not stopped for 2 s (timeout_s)");
  EXPECT_HAS(said, "environments stepping: 1 (its step 1)");
}

TEST(EnvPoolErrors, TheTimeoutDefaultsToXlaunchTimeoutS) {
  ASSERT_EQ(setenv("XLAUNCH_TIMEOUT_S", "3", 1), 0);
  auto gate = std::make_shared<Gate>();
  EnvPoolOptions o = gated(3, 2, 3, gate);
  o.timeout_s = 0;
  EnvPool pool(o);
  pool.async_reset();
  pool.send(torch::zeros({3}, torch::kLong), pool.recv().env_id);
  const std::string m = message_of<Error>([&] { pool.recv(); });
  gate->release();
  unsetenv("XLAUNCH_TIMEOUT_S");
  EXPECT_HAS(m, "the last 3 s (timeout_s");
  EXPECT_HAS(m, "environments stepping: 2 (its step 1)");
}

// Each step takes a millisecond, so the pool is destroyed while environments are being stepped.
class SlowEnv : public WalkEnv {
 public:
  xlaunch::rl::StepResult step(const Action& a, Rng& rng, float* obs) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return WalkEnv::step(a, rng, obs);
  }
};

TEST(EnvPoolErrors, DestroyedWithEnvironmentsInFlight) {
  const int before = thread_count();
  for (int threads : {1, 2, 4}) {
    EnvPoolOptions o = walk(16, 4, threads);
    o.factory = [] { return std::make_unique<SlowEnv>(); };
    EnvPool pool(o);
    pool.async_reset();
    const EnvBatch b = pool.recv();
    pool.send(torch::zeros({4}, torch::kLong), b.env_id);
  }
  EXPECT_EQ(settled_thread_count(before), before);
}

// Records the core it runs on in its observation.
class CoreEnv : public WalkEnv {
 public:
  void reset(Rng& rng, float* obs) override {
    WalkEnv::reset(rng, obs);
    obs[2] = static_cast<float>(sched_getcpu());
  }
};

TEST(EnvPoolThreads, PinnedThreadsRunOnTheirCores) {
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  std::vector<int> cores;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cores.push_back(c);
  for (int offset = 0; offset < static_cast<int>(cores.size()); ++offset) {
    EnvPoolOptions o = walk(4, 4, 1);
    o.factory = [] { return std::make_unique<CoreEnv>(); };
    o.thread_affinity_offset = offset;
    EnvPool pool(o);
    pool.async_reset();  // asynchronous: every environment runs on the one worker
    const EnvBatch b = pool.recv();
    for (int64_t r = 0; r < 4; ++r) EXPECT_EQ(b.obs[r][2].item<float>(), cores[offset]) << "offset " << offset;
  }
}

TEST(EnvPoolThreads, DefaultThreadsAreThisRanksShareOfItsCores) {
  EnvPoolOptions o = walk(64, 0, 0);
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  EXPECT_EQ(EnvPool(o).num_threads(), std::min(64, CPU_COUNT(&set)));
  o.num_envs = 1;
  EXPECT_EQ(EnvPool(o).num_threads(), 1);
}

TEST(EnvPoolDevice, ACudaDeviceWithoutCudaSaysSo) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "this machine has a GPU (EnvPoolCuda covers it)";
  EnvPoolOptions o = walk(2);
  o.device = c10::Device(c10::kCUDA, 0);
  const std::string m = message_of<UsageError>([&] { EnvPool p(o); });
  EXPECT_HAS(m, "EnvPool: device cuda:0 asked for");
}

}  // namespace
