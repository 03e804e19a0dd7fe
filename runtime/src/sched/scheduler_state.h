// What every Scheduler saves (its name, steps taken, the lrs) and the optimizer's lrs, shared by
// the named schedules and the LibTorch adapters. Internal to runtime/src/sched.
//
// Archive keys, flat in the archive the caller gives: "name" (string), "steps" (int), "lrs"
// (float list, one per param group); each kind adds its own keys beside them.
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

#include <cstdint>
#include <string>
#include <vector>

namespace xlaunch::sched {

std::vector<double> optimizer_lrs(const torch::optim::Optimizer& optimizer);
// Sets param group g's lr to lrs[g]; lrs has one per group (an internal invariant).
void set_optimizer_lrs(torch::optim::Optimizer& optimizer, const std::vector<double>& lrs);

void write_common(torch::serialize::OutputArchive& archive, const std::string& name, int64_t steps,
                  const std::vector<double>& lrs);

struct Common {
  int64_t steps;
  std::vector<double> lrs;
};
// Reads what write_common wrote, refusing (UsageError naming both) an archive of another
// scheduler or of another number of param groups than `optimizer` has, or one with no scheduler.
Common read_common(torch::serialize::InputArchive& archive, const std::string& name,
                   const torch::optim::Optimizer& optimizer);

// archive[key], or UsageError naming the key and the scheduler when the archive lacks it.
c10::IValue read_key(torch::serialize::InputArchive& archive, const std::string& key, const std::string& name);

}  // namespace xlaunch::sched
