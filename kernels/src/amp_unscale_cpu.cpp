// CPU reference of the fused unscale + non-finite check (see amp_unscale.h).
//
// The non-finite test looks at the exponent bits (all ones means inf or NaN), so it is exact
// under any floating-point flags and vectorises as integer work. The float loop runs in blocks
// of a fixed width so the compiler turns each block into vector code at -O2 as well as -O3.
#include <cstring>

#include "xlaunch/kernels/amp_unscale.h"
#include "xlaunch/kernels/half_bits.h"

namespace xlaunch::kernels {
namespace {

constexpr int kBlock = 16;

// Returns nonzero when any element is non-finite.
uint32_t unscale_f32(float* x, int64_t n, float inv_scale) {
  uint32_t bad = 0;
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    uint32_t bits[kBlock];
    std::memcpy(bits, x + i, sizeof bits);
    for (int j = 0; j < kBlock; ++j) bad |= static_cast<uint32_t>((bits[j] & 0x7f800000u) == 0x7f800000u);
    if (inv_scale != 1.0f)
      for (int j = 0; j < kBlock; ++j) x[i + j] *= inv_scale;
  }
  for (; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, x + i, sizeof bits);
    bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
    if (inv_scale != 1.0f) x[i] *= inv_scale;
  }
  return bad;
}

// 16-bit types: checked on the raw bits, scaled through float with round-to-nearest-even.
template <uint16_t kExpMask, float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
uint32_t unscale_16(uint16_t* x, int64_t n, float inv_scale) {
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; ++i) bad |= static_cast<uint32_t>((x[i] & kExpMask) == kExpMask);
  if (inv_scale != 1.0f)
    for (int64_t i = 0; i < n; ++i) x[i] = FromFloat(ToFloat(x[i]) * inv_scale);
  return bad;
}

}  // namespace

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::Float32: return "float32";
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
  }
  return "unknown";
}

void unscale_and_check_cpu(DType dtype, const TensorSpan* tensors, size_t count, float inv_scale,
                           float* found_inf) {
  uint32_t bad = 0;
  for (size_t t = 0; t < count; ++t) {
    const TensorSpan& s = tensors[t];
    if (s.numel <= 0) continue;
    switch (dtype) {
      case DType::Float32:
        bad |= unscale_f32(static_cast<float*>(s.data), s.numel, inv_scale);
        break;
      case DType::Float16:
        bad |= unscale_16<0x7c00, half_bits_to_float, float_to_half_bits>(static_cast<uint16_t*>(s.data),
                                                                          s.numel, inv_scale);
        break;
      case DType::BFloat16:
        bad |= unscale_16<0x7f80, bf16_bits_to_float, float_to_bf16_bits>(static_cast<uint16_t*>(s.data),
                                                                          s.numel, inv_scale);
        break;
    }
  }
  if (bad) *found_inf = 1.0f;
}

CudaError::CudaError(const char* call, const char* file, int line, std::string library_message)
    : std::runtime_error(std::string("CUDA call `") + call + "` failed at " + file + ":" +
                         std::to_string(line) + ": " + library_message),
      call_(call),
      file_(file),
      line_(line),
      library_message_(std::move(library_message)) {}

}  // namespace xlaunch::kernels
