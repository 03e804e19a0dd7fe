// Checking macros for CUDA runtime and NCCL calls (see check.h for the MPI one). Include only
// from code compiled with CUDA (runtime/src/cuda, runtime/src/nccl).
#pragma once

#include <cuda_runtime_api.h>

#include "check.h"

#define XLAUNCH_CHECK_CUDA(call)                                                             \
  do {                                                                                       \
    const cudaError_t xlaunch_cuda_rc_ = (call);                                             \
    if (xlaunch_cuda_rc_ != cudaSuccess)                                                     \
      ::xlaunch::detail::throw_call_error("CUDA", #call, __FILE__, __LINE__,                 \
                                          cudaGetErrorString(xlaunch_cuda_rc_));             \
  } while (0)

#if XLAUNCH_HAVE_NCCL
#include <nccl.h>
#define XLAUNCH_CHECK_NCCL(call)                                                             \
  do {                                                                                       \
    const ncclResult_t xlaunch_nccl_rc_ = (call);                                            \
    if (xlaunch_nccl_rc_ != ncclSuccess)                                                     \
      ::xlaunch::detail::throw_call_error("NCCL", #call, __FILE__, __LINE__,                 \
                                          std::string(ncclGetErrorString(xlaunch_nccl_rc_)) + \
                                              " (" + ncclGetLastError(nullptr) + ")");       \
  } while (0)
#endif
