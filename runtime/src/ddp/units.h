// Stage 3's units (xlaunch/fully_shard.h, docs/memory.md): how a prepared model is cut into units,
// and what happens around each unit's forward and backward.
//
// The cut (plan_units): walking the module tree from the model, a module is a candidate when it was
// declared FullyShard or is an entry of a Sequential, and holds trainable parameters; a candidate the
// wrap policy (fsdp.wrap) takes is a unit, and below a unit nothing else is one; one it does not
// take is looked into. Everything else is the root unit. The reducer's buckets are the units in
// reverse order (the order their backward ends in), then the root, so each unit's gradients are
// reduce-scattered as its backward ends. A parameter reached from two units (tied weights) is
// refused, naming both; one reached from a unit and from the root belongs to the root, which is
// whole for the whole step.
//
// Around the forward (Units): ForwardScope (a prepared model's call) gathers the root; each unit's
// call waits for its own gather and starts the gathers of the `prefetch` units that follow it in
// the last forward's order (the registration order before one was seen), so the next unit's
// communication runs while this one computes. After the call the unit is freed (reshard_after_
// forward), and an identity autograd function on its output gathers it again when its output's
// gradient arrives, starting the gathers of the units before it. The reducer frees each unit as its
// reduce-scatter starts (stages/stage3.cpp), and after every backward.
//
// With activation checkpointing (recompute) a unit's forward runs without autograd, and its output
// hangs from one node (RecomputeUnit) holding only the unit's inputs; when the output's gradient
// arrives the node gathers the unit, runs its forward again with autograd (the random generators
// and autocast as they were in forward) and backward through it, at once: the unit's parameters
// receive their gradients there, and the node hands on its inputs' gradients.
//
// Every rank runs the same forward, so the gathers are issued in the same order everywhere, on the
// autograd thread in backward as the reduce-scatters are.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "xlaunch/fully_shard.h"
#include "xlaunch/wrap_policy.h"

namespace xlaunch {

class Reducer;

struct UnitPlan {
  // Per unit (in the tree's order): its module, its path ("blocks.3"), its bucket.
  std::vector<std::shared_ptr<torch::nn::Module>> modules;
  std::vector<std::string> names;
  std::vector<size_t> bucket;
  // The reducer's buckets: indices into the parameters given.
  std::vector<std::vector<size_t>> buckets;
  int root_bucket = -1;  // -1: every trainable parameter is in a unit
  // The first parameter of the root that a unit's modules reach, said ("parameter 'x' belongs to the
  // root unit and is used inside unit 'y'"), or empty.
  std::string root_param_in_unit;
};

// Cuts `model` (see above) as `policy` says (xlaunch/wrap_policy.h). params/names: the reducer's
// trainable parameters and their names. Throws UsageError naming the modules when a parameter is
// reached from two units, and when the policy names no module, names one whose calls cannot be seen
// (no Sequential entry, not declared FullyShard), or (size) takes no candidate.
UnitPlan plan_units(const std::shared_ptr<torch::nn::Module>& model, const std::vector<at::Tensor>& params,
                    const std::vector<std::string>& names, const WrapPolicy& policy = {});

class Units {
 public:
  Units(UnitPlan plan, Reducer& reducer, int prefetch, bool reshard_after_forward, bool recompute);
  ~Units();
  Units(const Units&) = delete;
  Units& operator=(const Units&) = delete;

  const UnitPlan& plan() const { return plan_; }
  // A prepared model's forward begins (ForwardScope): the root is made whole.
  void start_forward();
  // Around unit u's forward (detail::UnitForward).
  void before_forward(size_t u);
  at::Tensor after_forward(size_t u, at::Tensor out);
  // Activation checkpointing (see above): unit u's output fn(inputs), recomputed in its backward.
  bool recomputes() const { return recompute_; }
  at::Tensor recompute_forward(size_t u, std::vector<at::Tensor> inputs, detail::UnitForward::Recomputable fn);
  void cannot_recompute(size_t u, const char* why);
  // Unit u's output gradient arrived: its backward is next.
  void before_backward(size_t u);
  // Every unit whole (a checkpoint, save_model), then freed; keep_changes: the shards take what the
  // whole parameters hold (after a load).
  void gather_all();
  void free_all(bool keep_changes);
  // Unit `bucket` alone whole, exactly (in the parameters' own dtype), and freed again without its
  // shard taking anything: save_model streams a model one unit at a time (collective, as gather_all).
  void gather_one(size_t bucket);
  void free_one(size_t bucket);

  // Bytes gathered since the last call (each unit's whole parameters, per gather; none alone), and
  // the most bytes of units (the root included) whole at once so far: for the report.
  uint64_t take_gathered_bytes();
  uint64_t peak_whole_bytes() const { return peak_whole_; }

  // The unit `module` is of a live Units, or null.
  static Units* of(const torch::nn::Module* module, size_t* unit);

 private:
  void gather(size_t u);  // starts it
  void make_whole(size_t u);  // starts it if need be, and waits
  // The units after (forward) or before (backward) u in the last forward's order.
  std::vector<size_t> next_units(size_t u, bool backward) const;

  UnitPlan plan_;
  Reducer& reducer_;
  int prefetch_;
  bool reshard_after_forward_;
  bool recompute_;
  std::vector<bool> said_not_recomputed_;
  std::mutex mu_;
  std::vector<size_t> order_;     // the units of the last complete forward, in call order
  std::vector<size_t> current_;   // of the forward running
  std::vector<uint64_t> bytes_;   // per bucket: its whole parameters' bytes
  uint64_t gathered_ = 0, peak_whole_ = 0;
  void count_gather(size_t bucket);
};

}  // namespace xlaunch
