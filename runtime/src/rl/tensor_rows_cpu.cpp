// The built-in tensor environments' rows on the CPU (tensor_rows_cpu.h).
#include "rl/tensor_rows_cpu.h"

#include <ATen/Parallel.h>

#include <atomic>

namespace xlaunch::rl::detail {

namespace rows = kernels::env_rows;

namespace {

template <class E>
constexpr RowsTraits traits_of(EnvKind kind) {
  return RowsTraits{kind, E::kId, E::kState, E::kObs, E::kActions};
}

const RowsTraits kTraits[] = {
    traits_of<rows::CartPole>(EnvKind::CartPole),
    traits_of<rows::Acrobot>(EnvKind::Acrobot),
    traits_of<rows::MountainCar>(EnvKind::MountainCar),
    traits_of<rows::MountainCarContinuous>(EnvKind::MountainCarContinuous),
    traits_of<rows::Pendulum>(EnvKind::Pendulum),
};

// Calls f(E{}) with the row type of `kind`.
template <class F>
void visit(EnvKind kind, F&& f) {
  switch (kind) {
    case EnvKind::CartPole: return f(rows::CartPole{});
    case EnvKind::Acrobot: return f(rows::Acrobot{});
    case EnvKind::MountainCar: return f(rows::MountainCar{});
    case EnvKind::MountainCarContinuous: return f(rows::MountainCarContinuous{});
    case EnvKind::Pendulum: return f(rows::Pendulum{});
  }
}

// Rows per task of the parallel loop: a classic-control row costs 20 to 200 ns, so below a few
// thousand rows the threads' wake-up costs more than the loop.
constexpr int64_t kGrain = 4096;

}  // namespace

const RowsTraits* rows_traits(int64_t* count) {
  *count = static_cast<int64_t>(sizeof kTraits / sizeof kTraits[0]);
  return kTraits;
}

int64_t cpu_rows(EnvKind kind, const Frame& frame, int64_t n, bool start) {
  std::atomic<int64_t> bad{0};
  visit(kind, [&](auto e) {
    using E = decltype(e);
    at::parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) {
      if (start) {
        for (int64_t i = begin; i < end; ++i) rows::start_row<E>(frame, i);
        return;
      }
      int64_t out_of_range = 0;
      for (int64_t i = begin; i < end; ++i) out_of_range += !rows::step_row<E>(frame, i);
      if (out_of_range) bad.fetch_add(out_of_range, std::memory_order_relaxed);
    });
  });
  return bad.load();
}

void cpu_reset_rows(EnvKind kind, float* state, const uint64_t* key, int64_t* counter, const bool* mask, int64_t n) {
  visit(kind, [&](auto e) {
    using E = decltype(e);
    for (int64_t i = 0; i < n; ++i) {
      if (!mask[i]) continue;
      rows::Draws d{key[i], counter + i};
      E::reset(state + i * E::kState, d);
    }
  });
}

void cpu_step_rows(EnvKind kind, float* state, const int64_t* action, const float* box, int64_t n, float* reward,
                   bool* terminated) {
  visit(kind, [&](auto e) {
    using E = decltype(e);
    for (int64_t i = 0; i < n; ++i) {
      const rows::Outcome o = E::step(state + i * E::kState, action ? action[i] : 0, box ? box + i : nullptr);
      reward[i] = o.reward;
      terminated[i] = o.terminated;
    }
  });
}

void cpu_observe_rows(EnvKind kind, const float* state, float* obs, int64_t n) {
  visit(kind, [&](auto e) {
    using E = decltype(e);
    for (int64_t i = 0; i < n; ++i) E::observe(state + i * E::kState, obs + i * E::kObs);
  });
}

}  // namespace xlaunch::rl::detail
