// adapt(LRScheduler): LibTorch's step-count schedulers (StepLR, a user's subclass) as a Scheduler.
// Their state is the step count and the lrs they last set: get_lrs() works from the optimizer's
// current lrs and step_count_, so restoring both continues the very same sequence.
#include <c10/util/Type.h>

#include <limits>
#include <typeinfo>

#include "sched/scheduler_state.h"
#include "xlaunch/error.h"
#include "xlaunch/lr_scheduler.h"

namespace xlaunch {
namespace {

// LRScheduler keeps its step count protected and offers no setter. A class derived from it may
// form a pointer to that member ([class.protected]: &Derived::member), and the pointer's type is
// `unsigned LRScheduler::*`, usable on any LRScheduler. Never constructed.
struct StepCount : torch::optim::LRScheduler {
  static unsigned& of(torch::optim::LRScheduler& s) { return s.*(&StepCount::step_count_); }
};

// "StepLR" for torch::optim::StepLR, the full name for a class of the user's.
std::string class_name(const torch::optim::LRScheduler& s) {
  std::string name = c10::demangle(typeid(s).name());
  const std::string torch_prefix = "torch::optim::";
  if (name.rfind(torch_prefix, 0) == 0) name.erase(0, torch_prefix.size());
  return name;
}

class LRSchedulerAdapter final : public Scheduler {
 public:
  LRSchedulerAdapter(torch::optim::LRScheduler& s, torch::optim::Optimizer& optimizer)
      : s_(s), optimizer_(optimizer), name_(class_name(s)), lrs_(sched::optimizer_lrs(optimizer)) {}

  using Scheduler::step;
  void step() override {
    s_.step();
    lrs_ = sched::optimizer_lrs(optimizer_);
  }
  std::vector<double> last_lr() const override { return lrs_; }
  torch::optim::Optimizer& optimizer() const override { return optimizer_; }
  std::string name() const override { return name_; }
  int64_t steps() const override { return StepCount::of(s_); }

  void save(torch::serialize::OutputArchive& archive) const override {
    sched::write_common(archive, name_, steps(), lrs_);
  }
  void load(torch::serialize::InputArchive& archive) override {
    const sched::Common c = sched::read_common(archive, name_, optimizer_);
    if (c.steps < 0 || c.steps > std::numeric_limits<unsigned>::max())
      throw UsageError("the checkpoint's " + name_ + " scheduler has taken " + std::to_string(c.steps) +
                       " steps, more than LibTorch's unsigned step count holds: the checkpoint is damaged");
    StepCount::of(s_) = static_cast<unsigned>(c.steps);
    lrs_ = c.lrs;
    sched::set_optimizer_lrs(optimizer_, lrs_);
  }

 private:
  torch::optim::LRScheduler& s_;
  torch::optim::Optimizer& optimizer_;
  std::string name_;
  std::vector<double> lrs_;
};

}  // namespace

std::unique_ptr<Scheduler> adapt(torch::optim::LRScheduler& s, torch::optim::Optimizer& optimizer) {
  return std::make_unique<LRSchedulerAdapter>(s, optimizer);
}

}  // namespace xlaunch
