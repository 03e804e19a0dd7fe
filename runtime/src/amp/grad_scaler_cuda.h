// The CUDA half of unscale_and_check_ (grad_scaler.cpp), built only with device paths.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "xlaunch/kernels/amp_unscale.h"

namespace xlaunch::detail {

// One fused launch (or a few, for very large groups) over `spans`, all on found_inf's device, on
// that device's current stream. Throws CommError naming the CUDA call, the rank and the host.
void unscale_and_check_cuda(kernels::DType dtype, const std::vector<kernels::TensorSpan>& spans,
                            float inv_scale, const at::Tensor& found_inf);

}  // namespace xlaunch::detail
