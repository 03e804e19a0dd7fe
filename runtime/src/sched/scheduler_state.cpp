#include "sched/scheduler_state.h"

#include "check.h"
#include "xlaunch/error.h"
#include "xlaunch/lr_scheduler.h"

namespace xlaunch {

// A scheduler supports one of the two; each message says which one to call.
void Scheduler::step() {
  throw UsageError(name() + " is driven by a metric: call step(metric) with the value it watches (e.g. the "
                            "validation loss), once per evaluation");
}

void Scheduler::step(double) {
  throw UsageError("the " + name() + " scheduler takes no metric: call step() once per optimizer step (only "
                   "ReduceLROnPlateau takes step(metric))");
}

namespace sched {

std::vector<double> optimizer_lrs(const torch::optim::Optimizer& optimizer) {
  std::vector<double> lrs;
  for (const auto& group : optimizer.param_groups()) lrs.push_back(group.options().get_lr());
  return lrs;
}

void set_optimizer_lrs(torch::optim::Optimizer& optimizer, const std::vector<double>& lrs) {
  XLAUNCH_ASSERT(lrs.size() == optimizer.param_groups().size(), "one lr per param group");
  for (size_t g = 0; g < lrs.size(); ++g) optimizer.param_groups()[g].options().set_lr(lrs[g]);
}

void write_common(torch::serialize::OutputArchive& archive, const std::string& name, int64_t steps,
                  const std::vector<double>& lrs) {
  archive.write("name", name);
  archive.write("steps", steps);
  archive.write("lrs", lrs);
}

c10::IValue read_key(torch::serialize::InputArchive& archive, const std::string& key, const std::string& name) {
  c10::IValue value;
  if (!archive.try_read(key, value))
    throw UsageError("the checkpoint's scheduler state has no '" + key + "' where the " + name +
                     " scheduler saves it: it was not written by this scheduler's save()");
  return value;
}

Common read_common(torch::serialize::InputArchive& archive, const std::string& name,
                   const torch::optim::Optimizer& optimizer) {
  c10::IValue saved_name;
  if (!archive.try_read("name", saved_name) || !saved_name.isString())
    throw UsageError("the checkpoint holds no scheduler state to load into the " + name +
                     " scheduler: save it with Scheduler::save, or do not load one");
  if (saved_name.toStringRef() != name)
    throw UsageError("the checkpoint holds a " + saved_name.toStringRef() + " scheduler, this one is " + name +
                     ": resume with the scheduler the checkpoint was saved with");
  Common c{read_key(archive, "steps", name).toInt(), read_key(archive, "lrs", name).toDoubleVector()};
  if (c.lrs.size() != optimizer.param_groups().size())
    throw UsageError("the checkpoint's " + name + " scheduler drove " + std::to_string(c.lrs.size()) +
                     " param groups, this optimizer has " + std::to_string(optimizer.param_groups().size()) +
                     ": build the optimizer with the same param groups as the saved run");
  return c;
}

}  // namespace sched
}  // namespace xlaunch
