// float16 / bfloat16 <-> float on raw 16-bit patterns, for host code without LibTorch.
// Round-to-nearest-even, as c10::Half, c10::BFloat16 and CUDA's __float2half_rn /
// __float2bfloat16_rn do, so the CPU reference and the CUDA kernel agree bit for bit on finite
// values. (The float16 pair is the branch-light algorithm of the FP16 library that c10 uses.)
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace xlaunch::kernels {

inline float bits_to_float(uint32_t w) {
  float f;
  std::memcpy(&f, &w, sizeof f);
  return f;
}

inline uint32_t float_to_bits(float f) {
  uint32_t w;
  std::memcpy(&w, &f, sizeof w);
  return w;
}

inline float bf16_bits_to_float(uint16_t h) { return bits_to_float(static_cast<uint32_t>(h) << 16); }

inline uint16_t float_to_bf16_bits(float f) {
  const uint32_t w = float_to_bits(f);
  if ((w & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN stays a (quiet) NaN
  return static_cast<uint16_t>((w + 0x7fffu + ((w >> 16) & 1u)) >> 16);
}

inline float half_bits_to_float(uint16_t h) {
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  // Normal numbers (and inf/NaN): shift the exponent and mantissa into place and rebias by 2^-112.
  const float normalized = bits_to_float((two_w >> 4) + (0xe0u << 23)) * 0x1.0p-112f;
  // Subnormals: put the mantissa under a magic exponent and subtract the bias.
  const float denormalized = bits_to_float((two_w >> 17) | (126u << 23)) - 0.5f;
  const uint32_t result =
      sign | (two_w < (1u << 27) ? float_to_bits(denormalized) : float_to_bits(normalized));
  return bits_to_float(result);
}

inline uint16_t float_to_half_bits(float f) {
  // Scaling up then down rounds the mantissa to half precision and flushes overflow to inf.
  float base = (std::fabs(f) * 0x1.0p+112f) * 0x1.0p-110f;
  const uint32_t w = float_to_bits(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xff000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = bits_to_float((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = float_to_bits(base);
  const uint32_t exp_bits = (bits >> 13) & 0x00007c00u;
  const uint32_t mantissa_bits = bits & 0x00000fffu;
  const uint32_t nonsign = exp_bits + mantissa_bits;
  return static_cast<uint16_t>((sign >> 16) | (shl1_w > 0xff000000u ? 0x7e00u : nonsign));
}

}  // namespace xlaunch::kernels
