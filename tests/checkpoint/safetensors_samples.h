// Tensors for the safetensors tests, the same in the GoogleTest program and the tool the python
// oracle drives: every supported dtype, in every shape that has its own path (0-dim, empty,
// strided), holding arbitrary bits (NaNs, infinities, -0 included) so that only a bitwise copy
// passes.
#pragma once

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "xlaunch/safetensors.h"

namespace xlaunch::test {

// safetensors name, torch type: the table the format promises (xlaunch/safetensors.h).
inline const std::vector<std::pair<std::string, at::ScalarType>>& safetensors_dtypes() {
  static const std::vector<std::pair<std::string, at::ScalarType>> table = {
      {"F64", at::kDouble}, {"F32", at::kFloat}, {"F16", at::kHalf}, {"BF16", at::kBFloat16},
      {"F8_E4M3", at::kFloat8_e4m3fn}, {"F8_E5M2", at::kFloat8_e5m2}, {"I64", at::kLong}, {"I32", at::kInt},
      {"I16", at::kShort}, {"I8", at::kChar}, {"U64", at::ScalarType::UInt64}, {"U32", at::ScalarType::UInt32},
      {"U16", at::ScalarType::UInt16}, {"U8", at::kByte}, {"BOOL", at::kBool}};
  return table;
}

// Random bits of `type` in `shape` (bools: 0 or 1, the only valid ones).
inline at::Tensor random_bits(at::ScalarType type, at::IntArrayRef shape, at::Generator& gen) {
  int64_t numel = 1;
  for (int64_t s : shape) numel *= s;
  if (type == at::kBool) return at::randint(0, 2, shape, gen, at::kByte).to(at::kBool);
  const int64_t size = static_cast<int64_t>(c10::elementSize(type));
  return at::randint(0, 256, {numel * size}, gen, at::kByte).view(type).reshape(shape);
}

// "<dtype>.<shape>" for each dtype: "scalar" (0-dim), "empty" [0], "empty3" [2, 0, 3],
// "matrix" [3, 5], "transposed" (a [5, 3] view of a [3, 5] buffer: not contiguous).
inline NamedTensors safetensors_samples(uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  NamedTensors out;
  for (const auto& [name, type] : safetensors_dtypes()) {
    out.emplace_back(name + ".scalar", random_bits(type, {}, gen));
    out.emplace_back(name + ".empty", random_bits(type, {0}, gen));
    out.emplace_back(name + ".empty3", random_bits(type, {2, 0, 3}, gen));
    out.emplace_back(name + ".matrix", random_bits(type, {3, 5}, gen));
    out.emplace_back(name + ".transposed", random_bits(type, {3, 5}, gen).t());
  }
  return out;
}

// Same dtype, same shape, same bytes.
inline bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  const at::Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), static_cast<size_t>(ca.nbytes())) == 0;
}

}  // namespace xlaunch::test
