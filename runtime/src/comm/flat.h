// Several tensors as one flat buffer and back: what coalesced collectives send (one collective
// instead of one per tensor) and where their results come back from.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace xlaunch {

// Copies the tensors, one after another in order, into the front of `flat` (1-D, with at least
// their total number of elements), casting to its dtype.
void flatten_into(const std::vector<at::Tensor>& ts, const at::Tensor& flat);
// The reverse: copies consecutive runs of `flat` into the tensors (any layout, cast to their dtype),
// in place and outside autograd, so parameters and buffers may be filled this way.
void unflatten_into(const at::Tensor& flat, const std::vector<at::Tensor>& ts);

}  // namespace xlaunch
