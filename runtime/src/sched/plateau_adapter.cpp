// adapt(ReduceLROnPlateauScheduler): LibTorch's metric-driven scheduler as a Scheduler, with its
// state saved and restored, which LibTorch itself cannot do.
#include "sched/scheduler_state.h"
#include "xlaunch/lr_scheduler.h"

namespace xlaunch {
namespace {

using Plateau = torch::optim::ReduceLROnPlateauScheduler;

// LibTorch keeps the plateau's state private, with no accessor. The names in an explicit
// instantiation are exempt from access checking (the standard, [temp.explicit]), so instantiating
// Expose<Tag, &Plateau::best> may name the private member and hand its pointer to the friend
// `member(Tag)`. Legal C++, and checked at compile time: a member LibTorch renames or retypes
// stops this file compiling instead of being read wrongly.
template <typename Tag, typename Tag::type M>
struct Expose {
  friend typename Tag::type member(Tag) { return M; }
};

#define XLAUNCH_PLATEAU_MEMBER(field, T)                    \
  struct Plateau_##field {                                  \
    using type = T Plateau::*;                              \
    friend type member(Plateau_##field);                    \
  };                                                        \
  template struct Expose<Plateau_##field, &Plateau::field>;
XLAUNCH_PLATEAU_MEMBER(best, float)
XLAUNCH_PLATEAU_MEMBER(num_bad_epochs, int)
XLAUNCH_PLATEAU_MEMBER(cooldown_counter, int)
XLAUNCH_PLATEAU_MEMBER(last_epoch, int)
#undef XLAUNCH_PLATEAU_MEMBER

class PlateauAdapter final : public Scheduler {
 public:
  PlateauAdapter(Plateau& s, torch::optim::Optimizer& optimizer)
      : s_(s), optimizer_(optimizer), lrs_(sched::optimizer_lrs(optimizer)) {}

  using Scheduler::step;
  // LibTorch's step takes a float: the metric is rounded to float before it is compared.
  void step(double metric) override {
    s_.step(static_cast<float>(metric));
    lrs_ = sched::optimizer_lrs(optimizer_);
  }
  bool takes_metric() const override { return true; }
  std::vector<double> last_lr() const override { return lrs_; }
  torch::optim::Optimizer& optimizer() const override { return optimizer_; }
  std::string name() const override { return "ReduceLROnPlateau"; }
  int64_t steps() const override { return s_.*member(Plateau_last_epoch{}); }

  // best is a float in LibTorch; a double holds it exactly.
  void save(torch::serialize::OutputArchive& archive) const override {
    sched::write_common(archive, name(), steps(), lrs_);
    archive.write("best", static_cast<double>(s_.*member(Plateau_best{})));
    archive.write("num_bad_epochs", static_cast<int64_t>(s_.*member(Plateau_num_bad_epochs{})));
    archive.write("cooldown_counter", static_cast<int64_t>(s_.*member(Plateau_cooldown_counter{})));
  }
  void load(torch::serialize::InputArchive& archive) override {
    const sched::Common c = sched::read_common(archive, name(), optimizer_);
    const double best = sched::read_key(archive, "best", name()).toDouble();
    const int64_t bad = sched::read_key(archive, "num_bad_epochs", name()).toInt();
    const int64_t cooldown = sched::read_key(archive, "cooldown_counter", name()).toInt();
    s_.*member(Plateau_last_epoch{}) = static_cast<int>(c.steps);
    s_.*member(Plateau_best{}) = static_cast<float>(best);
    s_.*member(Plateau_num_bad_epochs{}) = static_cast<int>(bad);
    s_.*member(Plateau_cooldown_counter{}) = static_cast<int>(cooldown);
    lrs_ = c.lrs;
    sched::set_optimizer_lrs(optimizer_, lrs_);
  }

 private:
  Plateau& s_;
  torch::optim::Optimizer& optimizer_;
  std::vector<double> lrs_;
};

}  // namespace

std::unique_ptr<Scheduler> adapt(torch::optim::ReduceLROnPlateauScheduler& s, torch::optim::Optimizer& optimizer) {
  return std::make_unique<PlateauAdapter>(s, optimizer);
}

}  // namespace xlaunch
