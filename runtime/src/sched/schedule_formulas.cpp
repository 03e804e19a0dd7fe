// transformers' schedules (optimization.py, the _get_*_lr_lambda functions), written in the same
// order of operations so that each factor is the same double as Python's: a resumed or compared
// run sees the very same lrs. Python's float(a) / float(b) and math.cos are the C++ ones here.
#include "sched/schedule_formulas.h"

#include <algorithm>
#include <cmath>

namespace xlaunch::sched {
namespace {

constexpr double kPi = 3.141592653589793;  // math.pi

// Every schedule but constant starts with this ramp, from 0 at step 0 to 1 at warmup_steps.
double warmup(int64_t step, int64_t warmup_steps) {
  return static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, warmup_steps));
}

// Where `step` is between the end of warmup (0) and total_steps (1).
double progress(int64_t step, const ScheduleOptions& o) {
  return static_cast<double>(step - o.warmup_steps) /
         static_cast<double>(std::max<int64_t>(1, o.total_steps - o.warmup_steps));
}

}  // namespace

double schedule_constant(int64_t, const ScheduleOptions&, double) { return 1.0; }

double schedule_constant_with_warmup(int64_t step, const ScheduleOptions& o, double) {
  return step < o.warmup_steps ? warmup(step, o.warmup_steps) : 1.0;
}

double schedule_linear(int64_t step, const ScheduleOptions& o, double) {
  if (step < o.warmup_steps) return warmup(step, o.warmup_steps);
  return std::max(0.0, static_cast<double>(o.total_steps - step) /
                           static_cast<double>(std::max<int64_t>(1, o.total_steps - o.warmup_steps)));
}

double schedule_cosine(int64_t step, const ScheduleOptions& o, double) {
  if (step < o.warmup_steps) return warmup(step, o.warmup_steps);
  return std::max(0.0, 0.5 * (1.0 + std::cos(kPi * o.num_cycles * 2.0 * progress(step, o))));
}

double schedule_cosine_with_restarts(int64_t step, const ScheduleOptions& o, double) {
  if (step < o.warmup_steps) return warmup(step, o.warmup_steps);
  const double p = progress(step, o);
  if (p >= 1.0) return 0.0;
  // Python's % on two non-negative floats is fmod.
  return std::max(0.0, 0.5 * (1.0 + std::cos(kPi * std::fmod(o.num_cycles * p, 1.0))));
}

double schedule_polynomial(int64_t step, const ScheduleOptions& o, double lr_init) {
  if (step < o.warmup_steps) return warmup(step, o.warmup_steps);
  // transformers returns lrs relative to lr_init, as LambdaLR multiplies by each group's lr.
  if (step > o.total_steps) return o.lr_end / lr_init;
  const double lr_range = lr_init - o.lr_end;
  const double remaining = 1.0 - static_cast<double>(step - o.warmup_steps) /
                                     static_cast<double>(o.total_steps - o.warmup_steps);
  return (lr_range * std::pow(remaining, o.power) + o.lr_end) / lr_init;
}

}  // namespace xlaunch::sched
