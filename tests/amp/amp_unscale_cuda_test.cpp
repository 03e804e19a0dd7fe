// The fused unscale + non-finite check's CUDA kernel against the CPU reference (where a GPU
// exists), and the cases of that comparison checked on the host (everywhere).
#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "xlaunch/kernels/amp_unscale.h"
#include "xlaunch/kernels/half_bits.h"
#include "unscale_group.h"

#if XLAUNCH_KERNELS_CUDA
#include <cuda_runtime.h>
#endif

namespace xk = xlaunch::kernels;

using xlaunch::test::kInf;
using xlaunch::test::kNaN;

namespace {


uint32_t mix(uint32_t x) {
  x ^= x >> 16; x *= 0x7feb352dU; x ^= x >> 15; x *= 0x846ca68bU; x ^= x >> 16;
  return x;
}

// A group of tensors in one device allocation: sizes around the chunk size (8192 float32 /
// 16384 16-bit elements), tiny ones, and starts that are not 16-byte aligned.
using Group = xlaunch::test::TensorGroup;

// How the tensors of a group start: each on a 16-byte boundary; each one element after the
// previous one's end (a bucket packed unpadded); or each 1, 2, 3, ... elements past a boundary.
enum class Starts { kAligned, kPacked, kOffsets };

Group make_group(Starts starts, int eb) {
  Group g;
  const std::vector<int64_t> sizes = {1, 7, 8192, 8193, 16384, 16385, 100000, 3, 64, 250001, 5};
  const int64_t per_vec = 16 / eb;
  for (size_t t = 0; t < sizes.size(); ++t) {
    const int64_t to_boundary = (per_vec - g.total % per_vec) % per_vec;
    if (starts == Starts::kAligned) g.total += to_boundary;
    if (starts == Starts::kPacked) g.total += 1;
    if (starts == Starts::kOffsets) g.total += to_boundary + static_cast<int64_t>(t + 1) % per_vec;
    g.offset.push_back(g.total);
    g.numel.push_back(sizes[t]);
    g.total += sizes[t];
  }
  return g;
}

// Where the CUDA comparison puts one inf or NaN (tensor, index), and the scale it unscales by.
struct BadCase {
  float inv_scale;
  std::vector<std::pair<int, int64_t>> bad;
};
std::vector<BadCase> bad_cases(const Group& g) {
  const int last = static_cast<int>(g.numel.size()) - 1;
  return {{1.0f / 1024, {{0, 0}}},                    // first element
          {1.0f / 1024, {{last, g.numel[last] - 1}}},  // last element
          {1.0f / 1024, {{3, 8192}}},                  // second chunk's head
          {1.0f / 1024, {{5, 8193}}},                  // second chunk's head or body
          {1.0f / 1024, {{2, 8191}}},                  // a chunk's tail
          {1.0f / 1024, {{9, 250000}}},                // tail of a big one
          {1.0f / 1024, {{6, 2}}},                     // a head (offset 7)
          {1.0f, {{5, 16384}, {1, 6}}}};               // check only, two
}

// The CUDA comparison's cases, checked where there is no GPU: each bad value lies inside its
// tensor (one past the end lands in a gap that nothing reads, and the case checks nothing), and
// the CPU reference flags it. The first GPU run found a case one past its tensor's end.
TEST(UnscaleLayout, EveryCaseOfTheCudaComparisonLiesInsideItsTensor) {
  for (int eb : {4, 2})
    for (Starts starts : {Starts::kAligned, Starts::kPacked, Starts::kOffsets}) {
      const Group g = make_group(starts, eb);
      for (const BadCase& c : bad_cases(g)) {
        std::vector<float> host(g.total, 1.0f);
        for (auto [t, i] : c.bad) {
          ASSERT_LT(i, g.numel[t]) << "tensor " << t << " has " << g.numel[t] << " elements";
          host[g.offset[t] + i] = kInf;
        }
        std::vector<xk::TensorSpan> spans;
        for (size_t t = 0; t < g.numel.size(); ++t) spans.push_back({host.data() + g.offset[t], g.numel[t]});
        float found = 0.0f;
        xk::unscale_and_check_cpu(xk::DType::Float32, spans.data(), spans.size(), c.inv_scale, &found);
        EXPECT_EQ(found, 1.0f) << "bad value at tensor " << c.bad[0].first << " index " << c.bad[0].second;
      }
    }
}

#if XLAUNCH_KERNELS_CUDA

#define CHECK_CUDA(call) ASSERT_EQ((call), cudaSuccess) << #call

class AmpUnscaleCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (xk::cuda_device_count() == 0)
      GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount returned 0 or failed): the CUDA "
                      "kernel is built but cannot run here; the CPU reference is tested above";
  }

  // Runs the reference and the kernel on the same data and compares every element and the flag.
  template <typename Raw>
  void compare(xk::DType dtype, const Group& g, float inv_scale,
               const std::vector<std::pair<int, int64_t>>& bad, uint32_t bad_bits) {
    std::vector<Raw> host(g.total);
    for (int64_t i = 0; i < g.total; ++i) {
      const float v = static_cast<float>(static_cast<int>(mix(i) % 20001) - 10000) * 3.7f;
      if constexpr (sizeof(Raw) == 4) host[i] = xk::float_to_bits(v);
      else host[i] = dtype == xk::DType::Float16 ? xk::float_to_half_bits(v / 16) : xk::float_to_bf16_bits(v);
    }
    for (auto [t, i] : bad) {
      // A bad value past its tensor's end would land in the gap between tensors, which neither
      // the kernel nor the reference reads: the case would check nothing.
      ASSERT_LT(i, g.numel[t]) << "test case out of range: tensor " << t << " has " << g.numel[t] << " elements";
      host[g.offset[t] + i] = static_cast<Raw>(bad_bits);
    }

    Raw* dev = nullptr;
    float* dev_found = nullptr;
    CHECK_CUDA(cudaMalloc(&dev, g.total * sizeof(Raw)));
    CHECK_CUDA(cudaMalloc(&dev_found, sizeof(float)));
    CHECK_CUDA(cudaMemcpy(dev, host.data(), g.total * sizeof(Raw), cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemset(dev_found, 0, sizeof(float)));
    std::vector<xk::TensorSpan> hspans, dspans;
    for (size_t t = 0; t < g.numel.size(); ++t) {
      hspans.push_back({host.data() + g.offset[t], g.numel[t]});
      dspans.push_back({dev + g.offset[t], g.numel[t]});
    }
    xk::unscale_and_check_cuda(dtype, dspans.data(), dspans.size(), inv_scale, dev_found, nullptr);
    float ref_found = 0.0f, cuda_found = -1.0f;
    xk::unscale_and_check_cpu(dtype, hspans.data(), hspans.size(), inv_scale, &ref_found);
    std::vector<Raw> out(g.total);
    CHECK_CUDA(cudaMemcpy(out.data(), dev, g.total * sizeof(Raw), cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(&cuda_found, dev_found, sizeof(float), cudaMemcpyDeviceToHost));
    cudaFree(dev);
    cudaFree(dev_found);
    EXPECT_EQ(cuda_found, ref_found);
    EXPECT_EQ(ref_found, bad.empty() ? 0.0f : 1.0f);
    const Raw exp_mask = sizeof(Raw) == 4 ? 0x7f800000u : dtype == xk::DType::Float16 ? 0x7c00 : 0x7f80;
    for (size_t t = 0; t < g.numel.size(); ++t)
      for (int64_t i = 0; i < g.numel[t]; ++i) {
        const int64_t k = g.offset[t] + i;
        const bool nan = (host[k] & exp_mask) == exp_mask && (host[k] & ~exp_mask & (sizeof(Raw) == 4 ? 0x7fffffffu : 0x7fff));
        if (nan) ASSERT_EQ(out[k] & exp_mask, exp_mask) << "NaN must stay NaN: tensor " << t << " index " << i;
        else ASSERT_EQ(out[k], host[k]) << dtype_name(dtype) << " tensor " << t << " index " << i;
      }
  }

  template <typename Raw>
  void all_cases(xk::DType dtype, uint32_t inf_bits, uint32_t nan_bits) {
    for (Starts starts : {Starts::kAligned, Starts::kPacked, Starts::kOffsets}) {
      const Group g = make_group(starts, sizeof(Raw));
      compare<Raw>(dtype, g, 1.0f / 65536, {}, 0);
      compare<Raw>(dtype, g, 1.0f, {}, 0);
      for (uint32_t bits : {inf_bits, nan_bits})
        for (const BadCase& c : bad_cases(g)) compare<Raw>(dtype, g, c.inv_scale, c.bad, bits);
    }
  }
};

TEST_F(AmpUnscaleCuda, Float32MatchesReference) { all_cases<uint32_t>(xk::DType::Float32, 0x7f800000u, 0xffc00001u); }
TEST_F(AmpUnscaleCuda, Float16MatchesReference) { all_cases<uint16_t>(xk::DType::Float16, 0xfc00u, 0x7e01u); }
TEST_F(AmpUnscaleCuda, BFloat16MatchesReference) { all_cases<uint16_t>(xk::DType::BFloat16, 0x7f80u, 0xffc1u); }

TEST_F(AmpUnscaleCuda, MoreTensorsThanOneLaunchHolds) {
  const size_t count = xk::cuda_max_tensors_per_launch() * 2 + 17;
  std::vector<float> host(count * 3);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i % 97) * 4.0f;
  host[host.size() - 1] = kInf;  // only in the last launch
  float* dev = nullptr;
  float* dev_found = nullptr;
  CHECK_CUDA(cudaMalloc(&dev, host.size() * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&dev_found, sizeof(float)));
  CHECK_CUDA(cudaMemcpy(dev, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemset(dev_found, 0, sizeof(float)));
  std::vector<xk::TensorSpan> spans;
  for (size_t t = 0; t < count; ++t) spans.push_back({dev + 3 * t, 3});
  xk::unscale_and_check_cuda(xk::DType::Float32, spans.data(), spans.size(), 0.25f, dev_found, nullptr);
  std::vector<float> out(host.size());
  float found = 0.0f;
  CHECK_CUDA(cudaMemcpy(out.data(), dev, out.size() * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(&found, dev_found, sizeof(float), cudaMemcpyDeviceToHost));
  cudaFree(dev);
  cudaFree(dev_found);
  EXPECT_EQ(found, 1.0f);
  for (size_t i = 0; i + 1 < host.size(); ++i) ASSERT_EQ(out[i], static_cast<float>(i % 97)) << i;
}

#else

TEST(AmpUnscaleCuda, NotBuilt) {
  GTEST_SKIP() << "the CUDA kernel is not built (no nvcc at configure time, or XLAUNCH_WITH_CUDA=OFF)";
}

#endif

}  // namespace
