// Fused unscale + non-finite check over many tensors: the core of GradScaler::unscale_.
//
// For every element x of every tensor: found_inf = 1 if x is inf or NaN; then x = x * inv_scale
// (computed in float, rounded back to the tensor's type; skipped when inv_scale == 1, which
// leaves the same values). found_inf is only ever set to 1, never cleared: the caller zeroes it
// once and may run several groups into the same flag. This is the operation of PyTorch's
// at::_amp_foreach_non_finite_check_and_unscale_, with inv_scale passed by value (the scaler
// keeps its scale on the host, see runtime/include/xlaunch/grad_scaler.h).
//
// One call handles one group of tensors that share a dtype (and, for CUDA, a device). The CPU
// reference is what the runtime's CPU path uses; the CUDA kernel is tested against it.
//
// No LibTorch here: raw pointers, element counts and a cudaStream_t.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

struct CUstream_st;  // as in cuda_runtime_api.h, so this header needs no CUDA headers

namespace xlaunch::kernels {

enum class DType { Float32, Float16, BFloat16 };

const char* dtype_name(DType dtype);

// One contiguous tensor: `numel` elements of the group's dtype starting at `data`.
struct TensorSpan {
  void* data;
  int64_t numel;
};

// CPU reference. found_inf points to one float in host memory.
void unscale_and_check_cpu(DType dtype, const TensorSpan* tensors, size_t count, float inv_scale,
                           float* found_inf);

// A failed CUDA call inside the kernels library. The runtime rethrows it as a CommError that
// also names the rank and host.
class CudaError : public std::runtime_error {
 public:
  CudaError(const char* call, const char* file, int line, std::string library_message);
  const std::string& call() const { return call_; }
  const std::string& file() const { return file_; }
  int line() const { return line_; }
  const std::string& library_message() const { return library_message_; }

 private:
  std::string call_, file_;
  int line_;
  std::string library_message_;
};

// Whether this build of the library contains the CUDA kernels (nvcc was found at configure).
constexpr bool kHaveCuda = XLAUNCH_KERNELS_CUDA;

#if XLAUNCH_KERNELS_CUDA
// CUDA kernel: enqueued on `stream`, asynchronous with respect to the host. All tensors and
// found_inf (one float) live in the memory of the stream's device. A tensor may start anywhere
// (a gradient packed unpadded in a bucket, a view at any element offset): the elements up to its
// first 16-byte boundary go one by one, the rest in 16-byte vectors (unscale_layout.h). Usually
// one launch for the whole group (up to cuda_max_tensors_per_launch() tensors); larger groups take
// several. Throws CudaError when the launch fails.
void unscale_and_check_cuda(DType dtype, const TensorSpan* tensors, size_t count, float inv_scale,
                            float* found_inf, CUstream_st* stream);

// Tensors described by one launch's parameters (CUDA >= 12.1 allows 32 KiB of kernel parameters).
size_t cuda_max_tensors_per_launch();

// Number of CUDA devices visible, 0 when there is no driver or no device (never throws).
int cuda_device_count();
#endif

}  // namespace xlaunch::kernels
