// TensorBoard histograms of tensors (a model's weights and gradients), computed where the tensor
// lives and copied to the host as a few numbers: one host synchronisation per tensor on a GPU,
// which is why they are opt-in (log_histograms_every_n_steps).
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "track/backend.h"

namespace xlaunch::track {

// `bins` equal-width buckets between the finite values' min and max (bucket_limit: their right
// edges); num, sum and sum_squares over the finite values too. Non-finite values are left out of
// the histogram; a tensor without finite values gives num 0 and no buckets.
Histogram histogram_of(const std::string& tag, const at::Tensor& t, int bins = 30);

}  // namespace xlaunch::track
