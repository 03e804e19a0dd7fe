// CUDA fused unscale + non-finite check over many tensors in one launch (see amp_unscale.h).
//
// Work list: every tensor is cut into chunks of kChunkBytes; block b handles the b-th chunk of
// the concatenation. The tensor table (pointers, sizes, prefix sums of chunk counts) travels in
// the kernel parameters (__grid_constant__, up to 32 KiB since CUDA 12.1), so a launch needs no
// device workspace, no host-to-device copy and no synchronisation. Each thread finds its chunk's
// tensor by binary search over the prefix sums.
//
// Bandwidth: each thread moves 16-byte vectors, kUnroll of them in flight before any is used (a
// block's whole chunk at once), and a chunk is big enough (32 KiB) that the search and the block
// start cost little, small enough that a ResNet-50 sized set gives several waves of blocks over
// the GPU. A chunk that does
// not start on a 16-byte boundary (a gradient packed after an odd-sized one in a bucket, a view)
// takes its first few elements one by one and the rest as vectors: the chunking and that split
// are unscale_layout.h's, shared with the host so that tests without a GPU check them.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "xlaunch/kernels/amp_unscale.h"
#include "xlaunch/kernels/unscale_layout.h"

#define XLAUNCH_KERNELS_CHECK_CUDA(call)                                                        \
  do {                                                                                          \
    const cudaError_t xlaunch_cuda_rc_ = (call);                                                \
    if (xlaunch_cuda_rc_ != cudaSuccess)                                                        \
      throw ::xlaunch::kernels::CudaError(#call, __FILE__, __LINE__,                            \
                                          std::string(cudaGetErrorName(xlaunch_cuda_rc_)) + ": " + \
                                              cudaGetErrorString(xlaunch_cuda_rc_));            \
  } while (0)

namespace xlaunch::kernels {
namespace {

namespace layout = unscale_layout;

constexpr int kThreads = 256;
constexpr int kUnroll = 8;  // kThreads * kUnroll vectors = one 32 KiB chunk: all its loads in flight at once
#if CUDART_VERSION >= 12010
constexpr int kMaxTensors = 1024;  // 20 KiB of parameters
#else
constexpr int kMaxTensors = 96;    // within the classic 4 KiB parameter limit
#endif

struct UnscaleArgs {
  void* data[kMaxTensors];
  int64_t numel[kMaxTensors];
  int chunk_begin[kMaxTensors + 1];  // chunk_begin[t]: first chunk of tensor t; [count]: total
  int count;
};

// Raw storage type, exponent mask and float conversions per element type.
template <DType D> struct Traits;
template <> struct Traits<DType::Float32> {
  using Raw = unsigned int;
  static constexpr Raw kExpMask = 0x7f800000u;
  __device__ static float to_float(Raw r) { return __uint_as_float(r); }
  __device__ static Raw from_float(float f) { return __float_as_uint(f); }
};
template <> struct Traits<DType::Float16> {
  using Raw = unsigned short;
  static constexpr Raw kExpMask = 0x7c00u;
  __device__ static float to_float(Raw r) { return __half2float(__ushort_as_half(r)); }
  __device__ static Raw from_float(float f) { return __half_as_ushort(__float2half_rn(f)); }
};
template <> struct Traits<DType::BFloat16> {
  using Raw = unsigned short;
  static constexpr Raw kExpMask = 0x7f80u;
  __device__ static float to_float(Raw r) { return __bfloat162float(__ushort_as_bfloat16(r)); }
  __device__ static Raw from_float(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }
};

template <DType D>
__device__ __forceinline__ bool process(typename Traits<D>::Raw* p, float inv_scale, bool scale) {
  using T = Traits<D>;
  const typename T::Raw r = *p;
  if (scale) *p = T::from_float(T::to_float(r) * inv_scale);
  return (r & T::kExpMask) == T::kExpMask;
}

template <DType D>
__global__ void __launch_bounds__(kThreads)
    unscale_kernel(const __grid_constant__ UnscaleArgs args, float inv_scale, float* found_inf) {
  using Raw = typename Traits<D>::Raw;
  constexpr int kVec = layout::kVectorBytes / sizeof(Raw);  // elements per 16-byte vector
  static_assert(layout::kChunkBytes % layout::kVectorBytes == 0, "chunks keep the tensor's alignment");

  // Every thread finds the chunk's tensor itself: the same parameter words for all of them (one
  // broadcast read each), and no barrier that holds the block's loads back until thread 0 is done.
  const int chunk = blockIdx.x;
  int lo = 0, hi = args.count - 1;  // last t with chunk_begin[t] <= chunk
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (args.chunk_begin[mid] <= chunk) lo = mid; else hi = mid - 1;
  }
  const int t = lo;
  const layout::Chunk c = layout::chunk_of(chunk - args.chunk_begin[t], args.numel[t], sizeof(Raw));
  Raw* p = static_cast<Raw*>(args.data[t]) + c.start;
  const layout::VectorSplit split = layout::vector_split(reinterpret_cast<uint64_t>(p), c.len, sizeof(Raw));
  const int head = static_cast<int>(split.head), body_end = static_cast<int>(split.head + split.body);
  const int len = static_cast<int>(c.len);
  const bool scale = inv_scale != 1.0f;
  bool bad = false;

  // The head: fewer than a vector's elements (all of them when the tensor is not even aligned to
  // its element size), one per thread.
  for (int i = threadIdx.x; i < head; i += kThreads) bad |= process<D>(p + i, inv_scale, scale);
  // The body, from the first 16-byte boundary: whole vectors.
  const int nvec = static_cast<int>(split.body / kVec);
  uint4* v = reinterpret_cast<uint4*>(p + head);
  for (int base = 0; base < nvec; base += kThreads * kUnroll) {
    uint4 r[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * kThreads + threadIdx.x;
      if (i < nvec) r[u] = __ldcs(v + i);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * kThreads + threadIdx.x;
      if (i < nvec) {
        Raw* e = reinterpret_cast<Raw*>(&r[u]);
#pragma unroll
        for (int k = 0; k < kVec; ++k) bad |= process<D>(e + k, inv_scale, scale);
        if (scale) __stcs(v + i, r[u]);
      }
    }
  }
  // The tail: what is left after the last whole vector.
  for (int i = body_end + threadIdx.x; i < len; i += kThreads) bad |= process<D>(p + i, inv_scale, scale);

  // One write per block that saw a non-finite value; racing writers all store 1.
  if (__syncthreads_or(bad) && threadIdx.x == 0) *found_inf = 1.0f;
}

template <DType D>
void launch(const UnscaleArgs& args, float inv_scale, float* found_inf, cudaStream_t stream) {
  const int blocks = args.chunk_begin[args.count];
  if (blocks == 0) return;
  unscale_kernel<D><<<blocks, kThreads, 0, stream>>>(args, inv_scale, found_inf);
  XLAUNCH_KERNELS_CHECK_CUDA(cudaGetLastError());
}

int elem_bytes(DType dtype) { return dtype == DType::Float32 ? 4 : 2; }

}  // namespace

size_t cuda_max_tensors_per_launch() { return kMaxTensors; }

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device"/"no driver" error
    return 0;
  }
  return n;
}

void unscale_and_check_cuda(DType dtype, const TensorSpan* tensors, size_t count, float inv_scale,
                            float* found_inf, CUstream_st* stream) {
  const int64_t chunk = layout::chunk_elems(elem_bytes(dtype));
  // Fewer blocks per launch than gridDim.x allows, so the chunk index always fits an int.
  constexpr int64_t kMaxChunksPerLaunch = int64_t{1} << 30;
  UnscaleArgs args;
  args.count = 0;
  args.chunk_begin[0] = 0;
  auto flush = [&] {
    switch (dtype) {
      case DType::Float32: launch<DType::Float32>(args, inv_scale, found_inf, stream); break;
      case DType::Float16: launch<DType::Float16>(args, inv_scale, found_inf, stream); break;
      case DType::BFloat16: launch<DType::BFloat16>(args, inv_scale, found_inf, stream); break;
    }
    args.count = 0;
  };
  for (size_t i = 0; i < count; ++i) {
    void* data = tensors[i].data;
    int64_t left = tensors[i].numel;
    // A tensor larger than one launch can take is split into pieces at chunk boundaries.
    while (left > 0) {
      if (args.count == kMaxTensors || args.chunk_begin[args.count] == kMaxChunksPerLaunch) flush();
      const int64_t room = kMaxChunksPerLaunch - args.chunk_begin[args.count];
      const int64_t chunks = std::min(layout::chunk_count(left, elem_bytes(dtype)), room);
      const int64_t n = std::min(left, chunks * chunk);
      args.data[args.count] = data;
      args.numel[args.count] = n;
      args.chunk_begin[args.count + 1] = static_cast<int>(args.chunk_begin[args.count] + chunks);
      ++args.count;
      data = static_cast<char*>(data) + n * elem_bytes(dtype);
      left -= n;
    }
  }
  if (args.count > 0) flush();
}

}  // namespace xlaunch::kernels
