// Training legs for the tests of sharded checkpoints (zero_checkpoint_test.cpp with ranks as threads,
// zero_checkpoint_mpi_test.cpp under mpirun): the test MLP trained for a range of steps on some
// world size and ZeRO stage, optionally loading or saving a checkpoint, and an oracle that does not
// use the checkpoint code at all: every rank's optimizer state gathered whole per parameter
// (gather_whole), and a fresh optimizer on another layout given exactly that state (seed_whole).
// "Resumed from the checkpoint" must equal "started from the gathered state", bit for bit.
#pragma once

#include <ATen/ops/cat.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../runtime/models.h"
#include "ddp/optim_state.h"
#include "ddp/zero_optimizer.h"
#include "state/torch_state.h"
#include "xlaunch/accelerator.h"
#include "xlaunch/extend/communicator.h"
#include "xlaunch/reducer.h"

namespace xlaunch::test {

enum class Opt { Sgd, AdamW };

// "<parameter>|<state entry>" -> its values over the whole parameter, flat (per-parameter values
// such as Adam's step as 0-dim tensors).
using Whole = std::map<std::string, at::Tensor>;

struct Leg {
  int world = 2;
  int stage = 0;
  Opt opt = Opt::Sgd;
  bool groups = true;  // AdamW: weights and biases in two groups (else one)
  bool biases_first = false;  // AdamW: the biases' group first
  double bucket_cap_mb = 0.002;  // several buckets, and pieces that cut parameters
  int from = 0, to = 0;          // global steps trained: [from, to)
  std::vector<at::Tensor> init;  // the model's parameters to start from (before a load)
  std::string load;              // a checkpoint to load first
  const Whole* seed = nullptr;   // or: this optimizer state to start from
  std::string save;              // a checkpoint to save at the end
  std::string shard_group = "world";  // ddp.shard_group ("machine": hybrid sharding, on several machines)
};

struct LegResult {
  at::Tensor params;  // this rank's, flat, at the end
  Whole whole;        // every rank's optimizer state, whole, at the end
};

inline std::unique_ptr<torch::optim::Optimizer> make_optimizer(Mlp& mlp, Opt opt, bool two_groups, bool biases_first) {
  if (opt == Opt::Sgd)
    return std::make_unique<torch::optim::SGD>(mlp->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  std::vector<at::Tensor> weights, biases;
  for (const auto& p : mlp->named_parameters())
    (two_groups && p.key().find("bias") != std::string::npos ? biases : weights).push_back(p.value());
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(weights, std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(0.01).weight_decay(0.1)));
  if (two_groups)
    groups.emplace(biases_first ? groups.begin() : groups.end(), biases,
                   std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(0.01).weight_decay(0)));
  return std::make_unique<torch::optim::AdamW>(groups, torch::optim::AdamWOptions(0.01));
}

inline at::Tensor flat(const torch::nn::Module& m) {
  std::vector<at::Tensor> ps;
  for (const auto& p : m.parameters()) ps.push_back(p.detach().reshape({-1}).clone());
  return at::cat(ps);
}

// What the optimizer holds, each as (tensor, its segments by parameter name): pieces when sharded,
// else whole parameters.
struct Held {
  at::Tensor tensor;
  std::vector<std::tuple<std::string, int64_t, int64_t>> segments;  // name, offset, length
};
inline std::vector<Held> held_of(torch::optim::Optimizer& inner, const ShardedOptimizer* sharded, const Mlp& mlp) {
  std::vector<Held> out;
  if (sharded) {
    for (const auto& group : sharded->pieces())
      for (const auto& b : group) {
        Held h{b.tensor, {}};
        for (const auto& s : b.piece.segments)
          h.segments.emplace_back(sharded->models()[b.model].reducer->names()[s.param], s.param_offset, s.length);
        out.push_back(std::move(h));
      }
    return out;
  }
  for (const auto& group : inner.param_groups())
    for (const at::Tensor& p : group.params())
      for (const auto& np : mlp->named_parameters())
        if (np.value().unsafeGetTensorImpl() == p.unsafeGetTensorImpl()) out.push_back(Held{p, {{np.key(), 0, p.numel()}}});
  return out;
}

// Every rank's optimizer state, whole, on every rank (collective over comm).
inline Whole gather_whole(torch::optim::Optimizer& inner, const ShardedOptimizer* sharded, const Mlp& mlp,
                          Communicator& comm) {
  std::map<std::string, int64_t> numel;
  for (const auto& np : mlp->named_parameters()) numel[np.key()] = np.value().numel();
  NamedTensors mine;  // "<key>" partial values, "<key>|mask" where they are this rank's
  std::map<std::string, std::pair<at::Tensor, at::Tensor>> partial;
  for (const Held& h : held_of(inner, sharded, mlp)) {
    const auto it = inner.state().find(h.tensor.unsafeGetTensorImpl());
    if (it == inner.state().end()) continue;
    for (const auto& [key, value] : state_entries(*it->second)) {
      int64_t at = 0;
      for (const auto& [name, offset, length] : h.segments) {
        const std::string k = name + "|" + key;
        if (value.isTensor() && value.toTensor().dim() > 0) {
          auto& [values, mask] = partial[k];
          if (!values.defined()) {
            values = at::zeros({numel[name]}, value.toTensor().options());
            mask = at::zeros({numel[name]}, at::kBool);
          }
          values.narrow(0, offset, length).copy_(value.toTensor().reshape({-1}).narrow(0, at, length));
          mask.narrow(0, offset, length).fill_(true);
        } else {
          mine.emplace_back(k, value.isTensor() ? value.toTensor() : at::scalar_tensor(value.toInt(), at::kLong));
        }
        at += length;
      }
    }
  }
  for (auto& [k, vm] : partial) {
    mine.emplace_back(k, vm.first);
    mine.emplace_back(k + "|mask", vm.second);
  }
  Whole out;
  for (const std::string& bytes : comm.allgather_strings(pickle_bytes(mine))) {
    const NamedTensors theirs = unpickle({{"x", bytes}}, "x");
    std::map<std::string, at::Tensor> by(theirs.begin(), theirs.end());
    for (const auto& [k, t] : theirs) {
      if (k.size() > 5 && k.compare(k.size() - 5, 5, "|mask") == 0) continue;
      const auto mask = by.find(k + "|mask");
      if (mask == by.end()) {
        out[k] = t;  // per parameter: the same on every rank that holds a piece of it
        continue;
      }
      at::Tensor& whole = out[k];
      whole = whole.defined() ? at::where(mask->second, t, whole) : at::where(mask->second, t, at::zeros_like(t));
    }
  }
  return out;
}

// Gives a fresh optimizer (no state) exactly `whole`, sliced for what it holds here.
inline void seed_whole(torch::optim::Optimizer& inner, const ShardedOptimizer* sharded, const Mlp& mlp, const Whole& whole,
                       Opt opt) {
  for (const Held& h : held_of(inner, sharded, mlp)) {
    auto slice = [&](const std::string& key) {
      std::vector<at::Tensor> parts;
      for (const auto& [name, offset, length] : h.segments) parts.push_back(whole.at(name + "|" + key).narrow(0, offset, length));
      return at::cat(parts).view(h.tensor.sizes()).clone();
    };
    const std::string first = std::get<0>(h.segments.front());
    if (opt == Opt::Sgd) {
      auto s = std::make_unique<torch::optim::SGDParamState>();
      s->momentum_buffer(slice("momentum_buffer"));
      inner.state()[h.tensor.unsafeGetTensorImpl()] = std::move(s);
    } else {
      auto s = std::make_unique<torch::optim::AdamWParamState>();
      s->step(whole.at(first + "|step").item<int64_t>());
      s->exp_avg(slice("exp_avg"));
      s->exp_avg_sq(slice("exp_avg_sq"));
      inner.state()[h.tensor.unsafeGetTensorImpl()] = std::move(s);
    }
  }
}

inline AcceleratorOptions leg_options(const Leg& leg) {
  AcceleratorOptions o;
  o.cpu = true;
  o.ddp.first_bucket_bytes = 64;
  o.ddp.bucket_cap_mb = leg.bucket_cap_mb;
  o.ddp.zero_stage = leg.stage;
  o.ddp.shard_group = leg.shard_group;
  return o;
}

// One rank's part of a leg (collective over comm, which has leg.world ranks).
inline LegResult leg_on_rank(const Leg& leg, std::shared_ptr<Communicator> comm) {
  Accelerator acc(leg_options(leg), comm);
  Mlp mlp;
  {
    torch::NoGradGuard no_grad;
    auto params = mlp->parameters();
    for (size_t i = 0; i < params.size(); ++i) params[i].copy_(leg.init[i]);
  }
  auto model = acc.prepare(mlp);
  auto inner = make_optimizer(mlp, leg.opt, leg.groups, leg.biases_first);
  auto& opt = acc.prepare(*inner);
  if (!leg.load.empty()) acc.load_state(leg.load);
  if (leg.seed) seed_whole(*inner, opt.sharded(), mlp, *leg.seed, leg.opt);
  for (int step = leg.from; step < leg.to; ++step) {
    acc.accumulate();
    const Batch b = mlp_batch(comm->rank(), step);
    acc.backward(loss_of(model(b.x), b.y));
    opt.step();
    opt.zero_grad();
  }
  if (!leg.save.empty()) acc.save_state(leg.save);
  LegResult out;
  // The parameters whole, as get_state_dict gathers them (at stage 3 each rank holds a shard).
  std::vector<at::Tensor> whole;
  const auto state = acc.get_state_dict(model);
  for (size_t i = 0; i < mlp->parameters().size(); ++i) whole.push_back(state[i].second.reshape({-1}));
  out.params = at::cat(whole);
  out.whole = gather_whole(*inner, opt.sharded(), mlp, *comm);
  return out;
}

inline std::vector<at::Tensor> initial_params(uint64_t seed = 5) {
  torch::manual_seed(seed);
  Mlp init;
  std::vector<at::Tensor> out;
  for (const auto& p : init->parameters()) out.push_back(p.detach().clone());
  return out;
}

// The parameters of a flat vector (flat()), as the model's tensors: for a leg's init.
inline std::vector<at::Tensor> unflatten(const at::Tensor& flat_params) {
  std::vector<at::Tensor> out;
  int64_t at = 0;
  for (const at::Tensor& p : initial_params()) {
    out.push_back(flat_params.narrow(0, at, p.numel()).view(p.sizes()).clone());
    at += p.numel();
  }
  return out;
}

}  // namespace xlaunch::test
