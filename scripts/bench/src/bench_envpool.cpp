// xlaunch's side of scripts/bench/envpool.sh: environment steps per second of an EnvPool.
//
//   bench_envpool --env E --num_envs N --mode sync|async --num_threads T --seconds S [--backend threads|tensor]
//       prints: xlaunch_sps=X
//
// --backend tensor (scripts/bench/tensor_env.sh): the pool's tensor backend (TensorEnv, sync only),
// on T intra-op threads.
// The actions are random valid actions drawn before the clock starts (64 action tensors, used in
// turn), so the policy costs nothing and the figure is the pool's. sync: step() of all N;
// async: batch_size = N/2 (at least 1), recv() then send() of the batch just received, as
// EnvPool's own asynchronous benchmark does. After a warm-up of S/5 seconds (at most 1), the steps
// of S seconds are counted (env_steps(): each environment's step once, resets not).
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "bench_timing.h"
#include "xlaunch/rl/env_pool.h"

namespace {

using xlaunch::bench::Clock;
using xlaunch::rl::EnvPool;
using xlaunch::rl::Space;

struct Args {
  std::string env = "CartPole-v1";
  int64_t num_envs = 8;
  bool async = false;
  int num_threads = 2;
  double seconds = 5;
  bool tensor = false;
};

Args parse(int argc, char** argv) {
  Args a;
  std::string mode = "sync", backend = "threads";
  CLI::App app{"xlaunch's side of scripts/bench/envpool.sh: environment steps per second of an EnvPool"};
  app.add_option("--env", a.env, "Environment id");
  app.add_option("--num_envs", a.num_envs, "Environments in the pool")->check(CLI::Range(1, 1 << 20));
  app.add_option("--mode", mode, "sync or async")->check(CLI::IsMember({"sync", "async"}));
  app.add_option("--num_threads", a.num_threads, "The pool's threads")->check(CLI::Range(1, 1024));
  app.add_option("--seconds", a.seconds, "Seconds to count steps")->check(CLI::Range(0.01, 3600.0));
  app.add_option("--backend", backend, "threads (Env objects on the pool's threads) or tensor (TensorEnv)")
      ->check(CLI::IsMember({"threads", "tensor"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e));
  }
  a.async = mode == "async";
  a.tensor = backend == "tensor";
  if (a.async && a.tensor) {
    std::fprintf(stderr, "bench_envpool: --backend tensor is synchronous; give --mode sync\n");
    std::exit(2);
  }
  return a;
}

// `count` tensors of `rows` random valid actions of `space`.
std::vector<at::Tensor> draw_actions(const Space& space, int64_t rows, int count) {
  xlaunch::rl::Rng rng(12345);
  std::vector<at::Tensor> out;
  for (int c = 0; c < count; ++c) {
    if (space.kind == Space::Kind::Discrete) {
      at::Tensor t = at::empty({rows}, at::kLong);
      for (int64_t r = 0; r < rows; ++r) t.data_ptr<int64_t>()[r] = static_cast<int64_t>(rng.next() % space.n);
      out.push_back(t);
      continue;
    }
    std::vector<int64_t> sizes{rows};
    sizes.insert(sizes.end(), space.shape.begin(), space.shape.end());
    at::Tensor t = at::empty(sizes, at::kFloat);
    const int64_t m = space.numel();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < m; ++j) {
        const float lo = std::isfinite(space.low[j]) ? space.low[j] : -1.f;
        const float hi = std::isfinite(space.high[j]) ? space.high[j] : 1.f;
        t.data_ptr<float>()[r * m + j] = static_cast<float>(rng.uniform(lo, hi));
      }
    out.push_back(t);
  }
  return out;
}

double run(const Args& a) {
  xlaunch::rl::EnvPoolOptions o;
  o.env_id = a.env;
  o.num_envs = a.num_envs;
  if (a.tensor) {
    o.backend = xlaunch::rl::EnvBackend::Tensor;
    at::set_num_threads(a.num_threads);
  } else {
    o.num_threads = a.num_threads;
  }
  o.batch_size = a.async ? std::max<int64_t>(1, a.num_envs / 2) : 0;
  EnvPool pool(o);
  const std::vector<at::Tensor> actions = draw_actions(pool.spec().action_space, pool.batch_size(), 64);
  size_t next = 0;
  std::function<void()> once;
  if (a.async) {
    pool.async_reset();
    once = [&] {
      const xlaunch::rl::EnvBatch b = pool.recv();
      pool.send(actions[next++ % actions.size()], b.env_id);
    };
  } else {
    pool.reset();
    once = [&] { pool.step(actions[next++ % actions.size()]); };
  }
  const auto for_seconds = [&](double s) {
    const Clock::time_point end = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
    while (Clock::now() < end) once();
  };
  for_seconds(std::min(1.0, a.seconds / 5));
  const int64_t steps0 = pool.env_steps();
  const Clock::time_point t0 = Clock::now();
  for_seconds(a.seconds);
  const double elapsed = xlaunch::bench::seconds_since(t0);
  return static_cast<double>(pool.env_steps() - steps0) / elapsed;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  try {
    std::printf("xlaunch_sps=%.0f\n", run(a));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_envpool: %s\n", e.what());
    return 1;
  }
}
