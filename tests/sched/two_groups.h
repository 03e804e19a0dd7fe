// An optimizer with two param groups of different lrs (0.1, the default, and 0.02), and an
// archive round trip through bytes, as a checkpoint would make it.
#pragma once

#include <torch/torch.h>

#include <sstream>
#include <vector>

#include "xlaunch/lr_scheduler.h"

namespace xlaunch::test {

inline constexpr double kLr0 = 0.1, kLr1 = 0.02;

template <typename Optim, typename Options>
struct TwoGroups {
  torch::Tensor w0 = torch::ones({1}).requires_grad_(), w1 = torch::ones({1}).requires_grad_();
  Optim optimizer{{torch::optim::OptimizerParamGroup({w0}),
                   torch::optim::OptimizerParamGroup({w1}, std::make_unique<Options>(kLr1))},
                  Options(kLr0)};
};
using TwoGroupsSGD = TwoGroups<torch::optim::SGD, torch::optim::SGDOptions>;
using TwoGroupsAdamW = TwoGroups<torch::optim::AdamW, torch::optim::AdamWOptions>;

inline std::vector<double> lrs_of(const torch::optim::Optimizer& optimizer) {
  std::vector<double> lrs;
  for (const auto& g : optimizer.param_groups()) lrs.push_back(g.options().get_lr());
  return lrs;
}

// s.save, written to bytes and read back: what load sees after a checkpoint.
inline void save_and_load(const Scheduler& from, Scheduler& into) {
  torch::serialize::OutputArchive out;
  from.save(out);
  std::ostringstream bytes;
  out.save_to(bytes);
  std::istringstream in_bytes(bytes.str());
  torch::serialize::InputArchive in;
  in.load_from(in_bytes);
  into.load(in);
}

}  // namespace xlaunch::test
