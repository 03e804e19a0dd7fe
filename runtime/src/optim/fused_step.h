// The fused optimizer step (optimizer.fused, docs/performance.md#compiling-the-step): LibTorch's
// SGD, Adam and AdamW, and xlaunch's Lion (xlaunch/lion.h), stepped in one pass over memory per
// parameter, on the CPU.
//
// LibTorch's step runs about ten whole-tensor operations per parameter (AdamW: mul_, mul_, add_,
// mul_, addcmul_, sqrt, div, add_, addcdiv_), each a pass over the parameter's memory, and a new
// tensor for the denominator; it runs them one parameter at a time, so a model of many small
// tensors steps at the speed of the operator dispatch. The fused step reads each element's
// parameter, gradient and state once and writes them once (optim/fused_kernels.h), in chunks of
// every parameter at once over the rank's intra-op threads.
//
// It is the same optimizer: the options come from its parameter groups at every step (so a
// scheduler's learning rate applies), and the state is LibTorch's own state objects (created as
// LibTorch creates them), so checkpoints, ZeRO's sharded state and switching the fused step off
// all see one optimizer. Results equal LibTorch's step within an ulp per step
// (tests/runtime/fused_step_test.cpp says which cases are bitwise).
#pragma once

#include <torch/optim/optimizer.h>

#include <string>

namespace xlaunch::optim {

// optimizer.fused: auto takes the fused step where it can and LibTorch's elsewhere; true takes it
// or fails naming why not; false is LibTorch's step.
enum class FusedMode { Auto, On, Off };
// "auto", "true" or "false" (the settings table checks the spelling).
FusedMode parse_fused_mode(const std::string& s);

// Why this optimizer's step cannot be fused as it stands, "" when it can: its type (SGD, Adam,
// AdamW and Lion fuse), a parameter's or gradient's device, dtype or layout (CPU; float32, or
// bfloat16 / float16 with a gradient of the same type; contiguous, dense), a parameter held twice,
// or a state tensor not of that kind.
//
// A bfloat16 or float16 parameter is stepped through float32 master weights kept in its state
// (optim/master_state.h), with float32 state; the parameter is written as its master rounded, in
// the same pass.
std::string why_not_fused(const torch::optim::Optimizer& optimizer);

// optimizer.step(), fused. Throws UsageError naming why_not_fused(optimizer) when that is not "";
// `checked`: the caller has just seen it "" (the check walks every parameter and its state).
void fused_step(torch::optim::Optimizer& optimizer, bool checked = false);

// For the line that says the fused step is taken: "" when every parameter is float32, else e.g.
// "float32 master weights for 12 bfloat16 parameters (+4.2 MB)" (the masters' bytes). `sharded`: the
// optimizer steps this rank's pieces of the model (ZeRO), and the line says "this rank's 12 bfloat16
// shard pieces".
std::string master_weights_summary(const torch::optim::Optimizer& optimizer, bool sharded = false);

// The optimizer's kind in messages: "SGD", "Adam", "AdamW", "Lion", or "this optimizer type".
std::string optimizer_kind(const torch::optim::Optimizer& optimizer);

// The error of optimizer.fused: true for the index-th prepared optimizer, which cannot be fused
// because `why`.
std::string fused_refusal(size_t index, const torch::optim::Optimizer& optimizer, const std::string& why);

}  // namespace xlaunch::optim
