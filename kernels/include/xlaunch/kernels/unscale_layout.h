// How the fused unscale (amp_unscale.h) cuts its work, as functions the CUDA kernel and the host
// both call: the kernel on the device, the unit tests here (where no GPU runs the kernel) on the
// host. So the index arithmetic that decides which element goes through which loop is tested on
// every machine, not only where a GPU is.
//
// 1. Every tensor is cut into chunks of kChunkBytes from its start; one block takes one chunk.
// 2. A chunk's elements are split into a head, a body and a tail: the head runs up to the first
//    16-byte boundary, the body is whole 16-byte vectors, the tail is what is left. The head and
//    the tail go element by element, the body in 16-byte loads and stores.
//
// Why a head: the reducer packs gradients into flat buckets without padding, and tensors may be
// views at any element offset, so after the first parameter whose size is not a multiple of the
// vector (4 float32, 8 float16/bfloat16 elements) every later gradient starts off a 16-byte
// boundary. Without the head such a tensor would run scalar from end to end.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define XLAUNCH_HOST_DEVICE __host__ __device__
#else
#define XLAUNCH_HOST_DEVICE
#endif

namespace xlaunch::kernels::unscale_layout {

inline constexpr int kVectorBytes = 16;
inline constexpr int64_t kChunkBytes = 32 * 1024;

// Elements per chunk: a multiple of the vector, so every chunk of a tensor starts at the same
// offset from a 16-byte boundary as the tensor does.
XLAUNCH_HOST_DEVICE constexpr int64_t chunk_elems(int elem_bytes) { return kChunkBytes / elem_bytes; }

// Chunks of a tensor of `numel` elements (0 for an empty one).
XLAUNCH_HOST_DEVICE constexpr int64_t chunk_count(int64_t numel, int elem_bytes) {
  return (numel + chunk_elems(elem_bytes) - 1) / chunk_elems(elem_bytes);
}

// Chunk `c` of a tensor: its first element and its length.
struct Chunk {
  int64_t start, len;
};
XLAUNCH_HOST_DEVICE constexpr Chunk chunk_of(int64_t c, int64_t numel, int elem_bytes) {
  const int64_t start = c * chunk_elems(elem_bytes);
  const int64_t left = numel - start;
  return {start, left < chunk_elems(elem_bytes) ? left : chunk_elems(elem_bytes)};
}

// The split of `n` elements of `elem_bytes` each that start at `address`: head + body + tail == n,
// body a multiple of the vector's elements and starting on a 16-byte boundary, head shorter than
// a vector. An address that is not a multiple of the element size can never reach a boundary on
// an element: all head.
struct VectorSplit {
  int64_t head, body, tail;
};
XLAUNCH_HOST_DEVICE constexpr VectorSplit vector_split(uint64_t address, int64_t n, int elem_bytes) {
  if (n <= 0) return {0, 0, 0};
  if (address % static_cast<uint64_t>(elem_bytes) != 0) return {n, 0, 0};
  const int64_t to_boundary =
      static_cast<int64_t>((kVectorBytes - address % kVectorBytes) % kVectorBytes) / elem_bytes;
  const int64_t head = to_boundary < n ? to_boundary : n;
  const int64_t per_vector = kVectorBytes / elem_bytes;
  const int64_t body = (n - head) / per_vector * per_vector;
  return {head, body, n - head - body};
}

}  // namespace xlaunch::kernels::unscale_layout
