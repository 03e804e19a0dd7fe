// Asynchronous saves (checkpoint.async, docs/checkpointing.md): what a checkpoint file is made of,
// copied at the step boundary, and a function that serializes the copy later, on the background
// thread, into files that restore what the synchronous save's restore. Training is held only for
// the copies.
#pragma once

#include <torch/optim/optimizer.h>

#include <functional>
#include <string>

#include "state/torch_state.h"

namespace xlaunch::checkpoint {

using Producer = std::function<std::string()>;

// The tensors copied to host memory now; pickle_bytes of the copies when called.
Producer pickle_snapshot(const NamedTensors& tensors);
// The same, as a safetensors file (safetensors::file_bytes): a stage-3 rank's parameter shard.
Producer safetensors_snapshot(const NamedTensors& tensors);

// The optimizer's state copied to host memory now, into an optimizer of its own type over the same
// parameters (its options and groups copied too); that optimizer's save() archive when called,
// which reads the parameters' identities only, never their values: the same state as the
// synchronous save's archive (its records perhaps in another order, which follows a hash map's).
// LibTorch's SGD, Adam, AdamW, Adagrad and RMSprop, and xlaunch's Lion, exactly (not a subclass);
// empty for any other type (LBFGS, a user's own), which the caller then serializes at once.
Producer optimizer_snapshot(const torch::optim::Optimizer& opt);

}  // namespace xlaunch::checkpoint
