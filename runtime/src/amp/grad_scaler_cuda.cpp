#include "amp/grad_scaler_cuda.h"

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "check.h"

namespace xlaunch::detail {

void unscale_and_check_cuda(kernels::DType dtype, const std::vector<kernels::TensorSpan>& spans,
                            float inv_scale, const at::Tensor& found_inf) {
  const c10::cuda::CUDAGuard guard(found_inf.device());
  // The current stream: the one backward produced the gradients on and the optimizer will read
  // them on, so no extra ordering is needed.
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(found_inf.device().index()).stream();
  try {
    kernels::unscale_and_check_cuda(dtype, spans.data(), spans.size(), inv_scale, found_inf.data_ptr<float>(),
                                    stream);
  } catch (const kernels::CudaError& e) {
    throw_call_error("CUDA", e.call().c_str(), e.file().c_str(), e.line(), e.library_message());
  }
}

}  // namespace xlaunch::detail
