// The named schedules by name (XLAUNCH_SCHEDULES), their options' checks, schedule_factor.
#include <iterator>
#include <sstream>

#include "sched/schedule_formulas.h"
#include "xlaunch/error.h"

namespace xlaunch {
namespace sched {
namespace {

std::string str(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

std::string names_list() {
  std::string names;
  for (const ScheduleInfo& s : kSchedules) names += std::string(names.empty() ? "" : ", ") + s.name;
  return names;
}

// The checks every schedule makes, whatever it reads: a negative count or NaN is a mistake even
// where it would be ignored.
void check_ranges(const ScheduleOptions& o) {
  if (o.warmup_steps < 0)
    throw UsageError("lr schedule: warmup_steps must be >= 0 (got " + std::to_string(o.warmup_steps) +
                     "); it counts optimizer steps, and 0 means no warmup");
  if (o.total_steps < 0)
    throw UsageError("lr schedule: total_steps must be >= 0 (got " + std::to_string(o.total_steps) +
                     "); it is the training's number of optimizer steps");
  if (!(o.num_cycles > 0) && o.num_cycles != -1)
    throw UsageError("lr schedule: num_cycles must be > 0, or -1 for the schedule's default (got " +
                     str(o.num_cycles) + ")");
  if (!(o.power >= 0)) throw UsageError("lr schedule: power must be >= 0 (got " + str(o.power) + ")");
  if (!(o.lr_end >= 0)) throw UsageError("lr schedule: lr_end must be >= 0 (got " + str(o.lr_end) + ")");
}

}  // namespace

Schedule find_schedule(const std::string& name) {
  static constexpr Factor kFactors[] = {
#define XLAUNCH_SCHEDULE_FACTOR(name, reads, cycles, meaning) &schedule_##name,
      XLAUNCH_SCHEDULES(XLAUNCH_SCHEDULE_FACTOR)
#undef XLAUNCH_SCHEDULE_FACTOR
  };
  for (size_t i = 0; i < std::size(kSchedules); ++i)
    if (name == kSchedules[i].name) return {kSchedules[i], kFactors[i]};
  throw UsageError("lr scheduler '" + name + "' is not one of " + names_list() +
                   " (docs/schedulers.md); LibTorch's StepLR or ReduceLROnPlateauScheduler: construct it "
                   "and pass it to xlaunch::adapt");
}

ScheduleOptions checked_options(const ScheduleInfo& s, ScheduleOptions o, double lr_init) {
  check_ranges(o);
  const std::string schedule = std::string("the ") + s.name + " schedule";
  if (s.reads & kReadsTotal) {
    if (o.total_steps == 0)
      throw UsageError(schedule + " needs total_steps, the training's number of optimizer steps (got 0): set "
                       "ScheduleOptions.total_steps, e.g. epochs * batches per epoch / gradient accumulation steps");
    if (o.warmup_steps > o.total_steps)
      throw UsageError(schedule + ": warmup_steps (" + std::to_string(o.warmup_steps) + ") exceeds total_steps (" +
                       std::to_string(o.total_steps) + "); lower warmup_steps or raise total_steps");
  }
  if (s.reads & kReadsLrEnd) {
    // The decay runs from the end of warmup to total_steps: transformers divides by that span.
    if (o.warmup_steps == o.total_steps)
      throw UsageError(schedule + " decays to lr_end between warmup_steps and total_steps, so warmup_steps (" +
                       std::to_string(o.warmup_steps) + ") must be less than total_steps (" +
                       std::to_string(o.total_steps) + ")");
    if (!(o.lr_end < lr_init))
      throw UsageError(schedule + " decays from the optimizer's lr (" + str(lr_init) + ") to lr_end (" +
                       str(o.lr_end) + "), so lr_end must be smaller: lower ScheduleOptions.lr_end");
  }
  if (o.num_cycles == -1) o.num_cycles = s.default_cycles;
  return o;
}

}  // namespace sched

std::vector<std::string> schedule_names() {
  std::vector<std::string> out;
  for (const ScheduleInfo& s : kSchedules) out.emplace_back(s.name);
  return out;
}

double schedule_factor(const std::string& name, int64_t step, const ScheduleOptions& options, double lr_init) {
  const sched::Schedule s = sched::find_schedule(name);
  if (step < 0) throw UsageError("schedule_factor: step must be >= 0 (got " + std::to_string(step) + ")");
  return s.factor(step, sched::checked_options(s.info, options, lr_init), lr_init);
}

}  // namespace xlaunch
