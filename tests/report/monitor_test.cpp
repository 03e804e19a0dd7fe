// The --monitor line on totals made by hand: no rate before the first step (the ranks are
// starting), then steps/s of rank 0, samples/s and the phase split of all ranks over the interval.
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "observe/monitor.h"

using namespace xlaunch::launcher;
using xlaunch::profile::Totals;

namespace {

// `steps` steps with these nanoseconds per phase (data_wait, forward, backward, comm_wait,
// optimizer, other) and 32 samples each.
Totals totals(uint64_t steps, std::vector<uint64_t> phase_ns) {
  Totals t;
  t.steps = steps;
  t.samples = 32 * steps;
  for (size_t p = 0; p < phase_ns.size(); ++p) t.phase_ns[p] = steps * phase_ns[p];
  return t;
}

}  // namespace

TEST(Monitor, BeforeAnyStepTheRanksAreStartingNotAtZero) {
  const std::vector<Totals> before(2);
  EXPECT_EQ(monitor_line(1, 1, before, {std::nullopt, std::nullopt}, {}),
            "xlaunch: monitor 1s: the ranks are starting (0 of 2 up, no step yet)");
  // Their stats files exist (the ranks are up), but no step has ended.
  EXPECT_EQ(monitor_line(2, 1, before, {Totals{}, std::nullopt}, {}),
            "xlaunch: monitor 2s: the ranks are starting (1 of 2 up, no step yet)");
}

TEST(Monitor, RatesAndPhaseSplitOverTheInterval) {
  const std::vector<Totals> before = {totals(10, {1, 1, 1, 1, 1, 5}), totals(10, {1, 1, 1, 1, 1, 5})};
  // 20 more steps each over 2 s; the interval's own phases: 10% data_wait, 40% backward, 50% other.
  Totals r0 = before[0], r1 = before[1];
  for (Totals* t : {&r0, &r1}) {
    t->steps += 20;
    t->samples += 20 * 32;
    t->phase_ns[0] += 20 * 10;
    t->phase_ns[2] += 20 * 40;
    t->phase_ns[5] += 20 * 50;
  }
  EXPECT_EQ(monitor_line(12, 2, before, {r0, r1}, {}),
            "xlaunch: monitor 12s: 10.00 steps/s, 640.0 samples/s | data_wait 10% forward 0% backward 40% "
            "comm_wait 0% optimizer 0% other 50%");
}

TEST(Monitor, AnIntervalWithoutStepsAfterTheStartIsAZeroRate) {
  const std::vector<Totals> before = {totals(5, {1, 1, 1, 1, 1, 1})};
  EXPECT_EQ(monitor_line(7, 1, before, {before[0]}, {}), "xlaunch: monitor 7s: 0.00 steps/s, 0.0 samples/s");
}

TEST(Monitor, EachGpuIsShown) {
  const std::vector<Totals> before(1);
  GpuSample g;
  g.sm_pct = 87;
  g.mem_used_gib = 10.2;
  g.mem_total_gib = 80;
  g.power_w = 310;
  EXPECT_EQ(monitor_line(3, 1, before, {totals(2, {0, 0, 0, 0, 0, 10})}, {g}),
            "xlaunch: monitor 3s: 2.00 steps/s, 64.0 samples/s | data_wait 0% forward 0% backward 0% comm_wait 0% "
            "optimizer 0% other 100% | gpu0 sm 87% mem 10.2/80.0 GiB 310 W");
}
