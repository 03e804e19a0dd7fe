// Learning-rate schedulers: what sets an optimizer's learning rates step by step, and what
// Accelerator::prepare takes. Two kinds behind one interface (Scheduler):
//   - the named schedules of transformers.get_scheduler (get_scheduler below), with its formulas
//     exactly: a step's factor (schedule_factor) times each param group's lr at construction;
//   - LibTorch's own schedulers (StepLR, any torch::optim::LRScheduler, ReduceLROnPlateauScheduler)
//     adapted (adapt below), so that they too save and restore exactly in a checkpoint.
// docs/schedulers.md has the formulas as a table and examples.
//
// The schedule table below is the one list of names: get_scheduler, schedule_factor and their
// error messages read it, and a test checks docs/schedulers.md against it. Adding a schedule: one
// row below, and one function schedule_<name> in runtime/src/sched/ (schedule_formulas.h).
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/optim/schedulers/lr_scheduler.h>
#include <torch/optim/schedulers/reduce_on_plateau_scheduler.h>
#include <torch/serialize/archive.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

// XLAUNCH_SCHEDULE(name, options it reads, default num_cycles, one-line meaning), one per named
// schedule; `name` is transformers' name and a C++ identifier. The options read are ScheduleReads
// flags (below); a schedule that does not read num_cycles has 0 as its default. Expand with a
// macro of four arguments: XLAUNCH_SCHEDULES(MY_MACRO).
// clang-format off
#define XLAUNCH_SCHEDULES(XLAUNCH_SCHEDULE)                                                                   \
  XLAUNCH_SCHEDULE(constant, 0, 0,                                                                            \
                   "the optimizer's lr, unchanged")                                                           \
  XLAUNCH_SCHEDULE(constant_with_warmup, kReadsWarmup, 0,                                                     \
                   "linear warmup from 0, then constant")                                                     \
  XLAUNCH_SCHEDULE(linear, kReadsWarmup | kReadsTotal, 0,                                                     \
                   "linear warmup from 0, then linear decay to 0 at total_steps")                             \
  XLAUNCH_SCHEDULE(cosine, kReadsWarmup | kReadsTotal | kReadsCycles, 0.5,                                    \
                   "linear warmup from 0, then a cosine over num_cycles waves (half a wave: down to 0)")      \
  XLAUNCH_SCHEDULE(cosine_with_restarts, kReadsWarmup | kReadsTotal | kReadsCycles, 1,                        \
                   "linear warmup from 0, then num_cycles cosine decays to 0, each restarting at the full lr") \
  XLAUNCH_SCHEDULE(polynomial, kReadsWarmup | kReadsTotal | kReadsPower | kReadsLrEnd, 0,                     \
                   "linear warmup from 0, then a polynomial decay (power) to lr_end at total_steps")
// clang-format on

namespace xlaunch {

// Anything that sets its optimizer's learning rates step by step. Call step() once per real
// optimizer step (after optimizer.step()); a metric-driven scheduler takes step(metric) instead,
// typically once per evaluation. A scheduler holds a reference to its optimizer (an adapter also
// to its LibTorch scheduler): keep them alive as long as the scheduler.
class Scheduler {
 public:
  virtual ~Scheduler() = default;
  // One optimizer step. A metric-driven scheduler (takes_metric()) throws UsageError saying to
  // call step(metric).
  virtual void step();
  // One evaluation's metric, for metric-driven schedulers (ReduceLROnPlateau); the others throw
  // UsageError saying to call step().
  virtual void step(double metric);
  virtual bool takes_metric() const { return false; }
  // Each param group's lr as set by the last step (or by construction), in param-group order.
  virtual std::vector<double> last_lr() const = 0;
  virtual torch::optim::Optimizer& optimizer() const = 0;
  // "cosine", "StepLR", "ReduceLROnPlateau", ...: load() refuses a checkpoint of another name.
  virtual std::string name() const = 0;
  // Everything an exact resume needs, the current lrs included. What is given at construction
  // (a schedule's options, StepLR's step size, the plateau's patience...) is not saved: build the
  // resumed scheduler as the first one was, as with PyTorch's state_dict.
  virtual void save(torch::serialize::OutputArchive& archive) const = 0;
  // Restores what save wrote AND sets the optimizer's lrs to the saved ones (bitwise), so the
  // resumed run continues the same lr sequence whatever the optimizer's own state held. Throws
  // UsageError, naming both sides, when the archive holds another scheduler (name) or another
  // number of param groups, and one saying so when it holds no scheduler state.
  virtual void load(torch::serialize::InputArchive& archive) = 0;
  // Steps taken since construction (restored by load): step() calls, or step(metric) calls.
  virtual int64_t steps() const = 0;
};

// Which ScheduleOptions a named schedule reads (the table's second column).
enum ScheduleReads : unsigned {
  kReadsWarmup = 1,  // warmup_steps
  kReadsTotal = 2,   // total_steps
  kReadsCycles = 4,  // num_cycles
  kReadsPower = 8,   // power
  kReadsLrEnd = 16,  // lr_end
};

// transformers.get_scheduler's arguments (num_warmup_steps, num_training_steps, scheduler_specific
// kwargs). Each schedule reads only its own (the table); the others are ignored but must still be
// in range. Validation throws UsageError naming the option and the fix:
//   warmup_steps >= 0, total_steps >= 0, power >= 0, lr_end >= 0, num_cycles > 0 or -1;
//   schedules reading total_steps: total_steps > 0 and warmup_steps <= total_steps;
//   polynomial: warmup_steps < total_steps (the decay needs a step), lr_end < the optimizer's lr.
struct ScheduleOptions {
  int64_t warmup_steps = 0;  // steps of linear warmup from 0 to the full lr
  int64_t total_steps = 0;   // the training's optimizer steps (transformers' num_training_steps)
  double num_cycles = -1;    // -1: the schedule's own default (0.5 cosine, 1 cosine_with_restarts)
  double power = 1.0;        // polynomial's exponent
  double lr_end = 1e-7;      // polynomial's final lr (absolute, not a factor)
};

struct ScheduleInfo {
  const char* name;
  unsigned reads;  // ScheduleReads flags
  double default_cycles;
  const char* meaning;
};

#define XLAUNCH_SCHEDULE_INFO(name, reads, cycles, meaning) ScheduleInfo{#name, reads, cycles, meaning},
inline constexpr ScheduleInfo kSchedules[] = {XLAUNCH_SCHEDULES(XLAUNCH_SCHEDULE_INFO)};
#undef XLAUNCH_SCHEDULE_INFO

// The schedules' names, in table order.
std::vector<std::string> schedule_names();

// The named schedule on `optimizer`, LambdaLR's semantics: base_lr[g] is param group g's lr now,
// the lr of group g after k steps is base_lr[g] * schedule_factor(name, k, ...), and factor(0) is
// applied here, at construction. Throws UsageError for an unknown name (listing the names) or
// options out of range (above). polynomial takes its lr_init from optimizer.defaults() (as
// transformers takes optimizer.defaults["lr"]), so lr_end is an absolute lr for every group only
// when they all start from the default.
std::unique_ptr<Scheduler> get_scheduler(const std::string& name, torch::optim::Optimizer& optimizer,
                                         ScheduleOptions options);

// The factor of the named schedule at `step` (0 = construction): pure, transformers' lr_lambda.
// lr_init is only read by polynomial (its factor is (lr_end + ...) / lr_init, transformers'
// optimizer.defaults["lr"]; the default 1.0 gives factors relative to an lr of 1); get_scheduler
// passes the optimizer's default lr. Throws as get_scheduler does; step must be >= 0.
double schedule_factor(const std::string& name, int64_t step, const ScheduleOptions& options,
                       double lr_init = 1.0);

// LibTorch's schedulers as Schedulers. `s` must drive `optimizer` (LibTorch keeps that reference
// private, hence the argument), and both must outlive the adapter; step() steps `s`.
//
// Any LRScheduler (StepLR, or your own subclass): name() is its class name without
// "torch::optim::" ("StepLR"); save keeps its step count and the lrs. A subclass that keeps
// state of its own beyond those must save that itself.
std::unique_ptr<Scheduler> adapt(torch::optim::LRScheduler& s, torch::optim::Optimizer& optimizer);
// ReduceLROnPlateauScheduler: name() "ReduceLROnPlateau", takes_metric(), step(metric) passes the
// metric as LibTorch's float. save keeps best, bad epochs, cooldown counter, last epoch and the lrs.
std::unique_ptr<Scheduler> adapt(torch::optim::ReduceLROnPlateauScheduler& s, torch::optim::Optimizer& optimizer);

}  // namespace xlaunch
