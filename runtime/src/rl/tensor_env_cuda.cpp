#include "rl/tensor_env_cuda.h"

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "check.h"
#include "xlaunch/kernels/amp_unscale.h"

namespace xlaunch::rl::detail {

void cuda_rows(kernels::env_rows::EnvKind kind, const kernels::env_rows::Frame& frame, int64_t n, bool start,
               const at::Tensor& bad_actions) {
  const c10::cuda::CUDAGuard guard(bad_actions.device());
  // The current stream: the policy's actions were made on it and its next operations read the batch.
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(bad_actions.device().index()).stream();
  try {
    kernels::env_rows::cuda_rows(kind, frame, n, start,
                                 reinterpret_cast<unsigned long long*>(bad_actions.data_ptr<int64_t>()), stream);
  } catch (const kernels::CudaError& e) {
    xlaunch::detail::throw_call_error("CUDA", e.call().c_str(), e.file().c_str(), e.line(), e.library_message());
  }
}

}  // namespace xlaunch::rl::detail
