// get_scheduler: a named schedule as PyTorch's LambdaLR runs it. The lr of group g after k steps is
// base_lr[g] * factor(k), computed afresh each step from the group's lr at construction (never
// from the previous lr), so it is the same double in a resumed run and in Python.
#include "check.h"
#include "sched/schedule_formulas.h"
#include "sched/scheduler_state.h"

namespace xlaunch {
namespace {

class NamedScheduler final : public Scheduler {
 public:
  NamedScheduler(sched::Schedule schedule, torch::optim::Optimizer& optimizer, ScheduleOptions options)
      : schedule_(schedule),
        optimizer_(optimizer),
        lr_init_(optimizer.defaults().get_lr()),
        options_(sched::checked_options(schedule.info, options, lr_init_)),
        base_lrs_(sched::optimizer_lrs(optimizer)) {
    apply();
  }

  using Scheduler::step;
  void step() override {
    ++steps_;
    apply();
  }
  std::vector<double> last_lr() const override { return lrs_; }
  torch::optim::Optimizer& optimizer() const override { return optimizer_; }
  std::string name() const override { return schedule_.info.name; }
  int64_t steps() const override { return steps_; }

  // base_lrs too: like LambdaLR's state_dict, so a resumed run scales the saved run's lrs even when
  // its optimizer was built with others.
  void save(torch::serialize::OutputArchive& archive) const override {
    sched::write_common(archive, name(), steps_, lrs_);
    archive.write("base_lrs", base_lrs_);
  }
  void load(torch::serialize::InputArchive& archive) override {
    const sched::Common c = sched::read_common(archive, name(), optimizer_);
    std::vector<double> base = sched::read_key(archive, "base_lrs", name()).toDoubleVector();
    XLAUNCH_ASSERT(base.size() == c.lrs.size(), "a named schedule saves one base lr per group");
    steps_ = c.steps;
    lrs_ = c.lrs;
    base_lrs_ = std::move(base);
    sched::set_optimizer_lrs(optimizer_, lrs_);
  }

 private:
  void apply() {
    const double factor = schedule_.factor(steps_, options_, lr_init_);
    lrs_.resize(base_lrs_.size());
    for (size_t g = 0; g < base_lrs_.size(); ++g) lrs_[g] = base_lrs_[g] * factor;
    sched::set_optimizer_lrs(optimizer_, lrs_);
  }

  sched::Schedule schedule_;
  torch::optim::Optimizer& optimizer_;
  double lr_init_;  // polynomial's: transformers' optimizer.defaults["lr"]
  ScheduleOptions options_;
  std::vector<double> base_lrs_;
  std::vector<double> lrs_;
  int64_t steps_ = 0;
};

}  // namespace

std::unique_ptr<Scheduler> get_scheduler(const std::string& name, torch::optim::Optimizer& optimizer,
                                         ScheduleOptions options) {
  return std::make_unique<NamedScheduler>(sched::find_schedule(name), optimizer, options);
}

}  // namespace xlaunch
