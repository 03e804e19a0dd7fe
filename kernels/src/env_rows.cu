// The built-in tensor environments on a GPU (env_rows.h): one thread per environment runs the same
// row functions as the CPU loop, so a step of N environments is one kernel launch, with no host
// round trip. A bad action is clamped and counted in a device counter (the host reads it only when
// asked: TensorEnv::check_actions and finished()).
#include <cuda_runtime.h>

#include <string>

#include "xlaunch/kernels/amp_unscale.h"
#include "xlaunch/kernels/env_rows.h"

namespace xlaunch::kernels::env_rows {
namespace {

constexpr int kThreads = 256;

template <class E>
__global__ void rows_kernel(Frame f, int64_t n, bool start, unsigned long long* bad) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  if (start) {
    start_row<E>(f, i);
    return;
  }
  if (!step_row<E>(f, i)) atomicAdd(bad, 1ull);
}

template <class E>
void launch(const Frame& f, int64_t n, bool start, unsigned long long* bad, cudaStream_t stream) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  rows_kernel<E><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(f, n, start, bad);
}

}  // namespace

void cuda_rows(EnvKind kind, const Frame& frame, int64_t n, bool start, unsigned long long* bad_actions,
               CUstream_st* stream) {
  if (n <= 0) return;
  switch (kind) {
    case EnvKind::CartPole: launch<CartPole>(frame, n, start, bad_actions, stream); break;
    case EnvKind::Acrobot: launch<Acrobot>(frame, n, start, bad_actions, stream); break;
    case EnvKind::MountainCar: launch<MountainCar>(frame, n, start, bad_actions, stream); break;
    case EnvKind::MountainCarContinuous: launch<MountainCarContinuous>(frame, n, start, bad_actions, stream); break;
    case EnvKind::Pendulum: launch<Pendulum>(frame, n, start, bad_actions, stream); break;
  }
  const cudaError_t rc = cudaGetLastError();
  if (rc != cudaSuccess)
    throw CudaError("env_rows kernel launch", __FILE__, __LINE__,
                    std::string(cudaGetErrorName(rc)) + ": " + cudaGetErrorString(rc));
}

}  // namespace xlaunch::kernels::env_rows
