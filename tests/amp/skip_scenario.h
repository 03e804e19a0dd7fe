// The cross-rank skip scenario, shared by the in-process (threads) and the mpirun tests.
//
// Each rank trains w (4 float32) on loss = sum(w * x(step, rank)) with SGD (lr 1/4), through a
// GradScaler with growth_interval 3, WITHOUT averaging gradients, so only the found-inf
// reduction can make the ranks agree. Rank 1 gets an inf in its gradient at step kInfStep and a
// NaN at kNaNStep; every x is an integer, so every expected value is exact and each rank knows
// its own expected w without talking to the others.
#pragma once

#include <ATen/ops/tensor.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <torch/optim/sgd.h>

#include <limits>
#include <memory>
#include <vector>

#include "xlaunch/extend/communicator.h"
#include "xlaunch/grad_scaler.h"

namespace xlaunch::test {

constexpr int kSteps = 9;
constexpr int kInfStep = 3;
constexpr int kNaNStep = 4;
constexpr double kLr = 0.25;
constexpr int64_t kGrowthInterval = 3;

inline float x_value(int step, int rank, int i) { return static_cast<float>((step * 3 + rank * 5 + i) % 7 - 3); }

struct StepRecord {
  bool stepped = false;
  bool skipped = false;
  double scale_after_update = 0;
  std::vector<float> w_after;
};

inline std::vector<StepRecord> run_skip_scenario(std::shared_ptr<xlaunch::Communicator> comm) {
  const int rank = comm->rank();
  at::Tensor w = at::zeros({4}).requires_grad_(true);
  torch::optim::SGD opt({w}, torch::optim::SGDOptions(kLr));
  xlaunch::GradScalerOptions o;
  o.init_scale = 1024;
  o.growth_interval = kGrowthInterval;
  xlaunch::GradScaler scaler(o, comm);
  std::vector<StepRecord> out;
  for (int step = 0; step < kSteps; ++step) {
    opt.zero_grad();
    std::vector<float> xs;
    for (int i = 0; i < 4; ++i) xs.push_back(x_value(step, rank, i));
    const at::Tensor loss = (w * at::tensor(xs)).sum();
    scaler.scale(loss).backward();
    if (rank == 1 && step == kInfStep) w.mutable_grad()[2].fill_(std::numeric_limits<float>::infinity());
    if (rank == 1 && step == kNaNStep) w.mutable_grad()[0].fill_(std::numeric_limits<float>::quiet_NaN());
    StepRecord r;
    r.stepped = scaler.step(opt);
    r.skipped = scaler.last_step_skipped();
    scaler.update();
    r.scale_after_update = scaler.get_scale();
    const at::Tensor wc = w.detach().contiguous();
    r.w_after.assign(wc.data_ptr<float>(), wc.data_ptr<float>() + 4);
    out.push_back(r);
  }
  return out;
}

// What every rank must have seen: skips at the two injected steps only, the scale halving at
// each, growing after kGrowthInterval clean steps, and w moving on every other step only.
inline std::vector<StepRecord> expected_skip_scenario(int rank) {
  std::vector<StepRecord> out;
  std::vector<float> w(4, 0.0f);
  double scale = 1024;
  int clean = 0;
  for (int step = 0; step < kSteps; ++step) {
    StepRecord r;
    r.skipped = step == kInfStep || step == kNaNStep;
    r.stepped = !r.skipped;
    if (r.skipped) {
      scale *= 0.5;
      clean = 0;
    } else {
      for (int i = 0; i < 4; ++i) w[i] -= static_cast<float>(kLr) * x_value(step, rank, i);
      if (++clean == kGrowthInterval) {
        scale *= 2;
        clean = 0;
      }
    }
    r.scale_after_update = scale;
    r.w_after = w;
    out.push_back(r);
  }
  return out;
}

}  // namespace xlaunch::test
