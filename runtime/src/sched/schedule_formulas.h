// The named schedules' formulas (transformers' lr_lambda functions), one per row of
// XLAUNCH_SCHEDULES, and the table that finds one by name. Internal to runtime/src/sched.
#pragma once

#include "xlaunch/lr_scheduler.h"

namespace xlaunch::sched {

// A schedule's factor at `step` >= 0, on options already checked and with num_cycles resolved;
// lr_init is polynomial's (transformers' optimizer.defaults["lr"]).
using Factor = double (*)(int64_t step, const ScheduleOptions& options, double lr_init);

#define XLAUNCH_SCHEDULE_DECLARE(name, reads, cycles, meaning) \
  double schedule_##name(int64_t step, const ScheduleOptions& options, double lr_init);
XLAUNCH_SCHEDULES(XLAUNCH_SCHEDULE_DECLARE)
#undef XLAUNCH_SCHEDULE_DECLARE

struct Schedule {
  const ScheduleInfo& info;
  Factor factor;
};

// The row of `name`; UsageError listing the names when there is none.
Schedule find_schedule(const std::string& name);

// `options` checked for `schedule` (UsageError naming the option and the fix) with num_cycles
// -1 replaced by the schedule's default.
ScheduleOptions checked_options(const ScheduleInfo& schedule, ScheduleOptions options, double lr_init);

}  // namespace xlaunch::sched
