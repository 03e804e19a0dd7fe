// The fused unscale + non-finite check: the CPU reference against values known in advance, and the
// kernel's work split (unscale_layout.h) walked on the host against the reference. The CUDA kernel
// against the reference: amp_unscale_cuda_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "xlaunch/kernels/amp_unscale.h"
#include "xlaunch/kernels/half_bits.h"
#include "xlaunch/kernels/unscale_layout.h"
#include "unscale_group.h"

namespace xk = xlaunch::kernels;
using xlaunch::test::TensorGroup;

using xlaunch::test::kInf;
using xlaunch::test::kNaN;

namespace {


// Integer-valued: v(t, i) * 1024 and its unscaled value are exact in float32.
float value(int t, int64_t i) { return static_cast<float>(((t * 131 + i * 7) % 2001) - 1000); }

TEST(AmpUnscaleCpu, Float32UnscalesExactlyAndReportsNothingWhenFinite) {
  const std::vector<int64_t> sizes = {0, 1, 15, 16, 17, 1000, 4099};
  std::vector<std::vector<float>> data(sizes.size());
  std::vector<xk::TensorSpan> spans;
  for (size_t t = 0; t < sizes.size(); ++t) {
    for (int64_t i = 0; i < sizes[t]; ++i) data[t].push_back(value(t, i) * 1024.0f);
    spans.push_back({data[t].data(), sizes[t]});
  }
  float found = 0.0f;
  xk::unscale_and_check_cpu(xk::DType::Float32, spans.data(), spans.size(), 1.0f / 1024, &found);
  EXPECT_EQ(found, 0.0f);
  for (size_t t = 0; t < sizes.size(); ++t)
    for (int64_t i = 0; i < sizes[t]; ++i) ASSERT_EQ(data[t][i], value(t, i)) << "tensor " << t << " index " << i;
}

TEST(AmpUnscaleCpu, Float32FindsInfAndNaNAtEveryKindOfPosition) {
  // Positions in the vectorised blocks, at block edges and in the scalar tail.
  const int64_t n = 53;
  for (float bad : {kInf, -kInf, kNaN}) {
    for (int64_t pos : {int64_t{0}, int64_t{15}, int64_t{16}, int64_t{31}, int64_t{48}, n - 1}) {
      for (int which = 0; which < 3; ++which) {
        std::vector<std::vector<float>> data(3, std::vector<float>(n, 2.0f));
        data[which][pos] = bad;
        std::vector<xk::TensorSpan> spans;
        for (auto& d : data) spans.push_back({d.data(), n});
        float found = 0.0f;
        xk::unscale_and_check_cpu(xk::DType::Float32, spans.data(), spans.size(), 0.5f, &found);
        ASSERT_EQ(found, 1.0f) << "value " << bad << " at tensor " << which << " index " << pos;
        // Every finite element is still unscaled (the step is skipped, but the op is the op).
        for (int t = 0; t < 3; ++t)
          for (int64_t i = 0; i < n; ++i)
            if (!(t == which && i == pos)) ASSERT_EQ(data[t][i], 1.0f);
      }
    }
  }
}

TEST(AmpUnscaleCpu, InvScaleOneOnlyChecksAndFlagIsNeverCleared) {
  std::vector<float> a = {1.5f, -2.25f, 3.0f};
  xk::TensorSpan s{a.data(), 3};
  float found = 1.0f;  // set by an earlier group
  xk::unscale_and_check_cpu(xk::DType::Float32, &s, 1, 1.0f, &found);
  EXPECT_EQ(found, 1.0f);
  EXPECT_EQ(a, (std::vector<float>{1.5f, -2.25f, 3.0f}));
}

TEST(AmpUnscaleCpu, HalfAndBFloat16BitConversions) {
  EXPECT_EQ(xk::float_to_half_bits(1.0f), 0x3c00);
  EXPECT_EQ(xk::float_to_half_bits(65504.0f), 0x7bff);
  EXPECT_EQ(xk::float_to_half_bits(65536.0f), 0x7c00);          // overflows to inf
  EXPECT_EQ(xk::float_to_half_bits(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(xk::float_to_half_bits(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie to even
  EXPECT_EQ(xk::float_to_half_bits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie to even
  EXPECT_EQ(xk::half_bits_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(xk::half_bits_to_float(0xc000), -2.0f);
  EXPECT_TRUE(std::isinf(xk::half_bits_to_float(0x7c00)));
  EXPECT_TRUE(std::isnan(xk::half_bits_to_float(0x7e00)));
  EXPECT_EQ(xk::float_to_bf16_bits(1.0f), 0x3f80);
  EXPECT_EQ(xk::float_to_bf16_bits(1.0f + std::ldexp(1.0f, -8)), 0x3f80);      // tie to even
  EXPECT_EQ(xk::float_to_bf16_bits(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // tie to even
  EXPECT_EQ(xk::bf16_bits_to_float(0xc040), -3.0f);
  EXPECT_TRUE(std::isnan(xk::bf16_bits_to_float(xk::float_to_bf16_bits(kNaN))));
  for (int h = 0; h < 0x7c00; ++h)  // every finite positive half survives the round trip
    ASSERT_EQ(xk::float_to_half_bits(xk::half_bits_to_float(h)), h) << h;
}

void check_16bit(xk::DType dtype, uint16_t (*from)(float), float (*to)(uint16_t), uint16_t inf_bits) {
  std::vector<uint16_t> a(37), b(5);
  for (size_t i = 0; i < a.size(); ++i) a[i] = from(value(0, i) * 8.0f);
  for (size_t i = 0; i < b.size(); ++i) b[i] = from(value(1, i) * 8.0f);
  xk::TensorSpan spans[] = {{a.data(), 37}, {b.data(), 5}};
  float found = 0.0f;
  xk::unscale_and_check_cpu(dtype, spans, 2, 0.125f, &found);
  EXPECT_EQ(found, 0.0f);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(to(a[i]), to(from(value(0, i)))) << i;
  b[4] = inf_bits;
  xk::unscale_and_check_cpu(dtype, spans, 2, 1.0f, &found);
  EXPECT_EQ(found, 1.0f);
  found = 0.0f;
  b[4] = inf_bits | 0x8001;  // a negative NaN
  xk::unscale_and_check_cpu(dtype, spans, 2, 1.0f, &found);
  EXPECT_EQ(found, 1.0f);
}

TEST(AmpUnscaleCpu, Float16) {
  check_16bit(xk::DType::Float16, xk::float_to_half_bits, xk::half_bits_to_float, 0x7c00);
}

TEST(AmpUnscaleCpu, BFloat16) {
  check_16bit(xk::DType::BFloat16, xk::float_to_bf16_bits, xk::bf16_bits_to_float, 0x7f80);
}

namespace layout = xk::unscale_layout;

TEST(UnscaleLayout, VectorSplitLiteralCases) {
  // float32 one element past a boundary: 3 to reach the next one, 4 vectors of 4, 1 left.
  auto s = layout::vector_split(0x1004, 20, 4);
  EXPECT_EQ(s.head, 3);
  EXPECT_EQ(s.body, 16);
  EXPECT_EQ(s.tail, 1);
  s = layout::vector_split(0x1000, 20, 4);  // aligned: no head
  EXPECT_EQ(s.head, 0);
  EXPECT_EQ(s.body, 20);
  EXPECT_EQ(s.tail, 0);
  s = layout::vector_split(0x100e, 20, 2);  // 16-bit, 7 elements past: 1 to go, 2 vectors of 8
  EXPECT_EQ(s.head, 1);
  EXPECT_EQ(s.body, 16);
  EXPECT_EQ(s.tail, 3);
  s = layout::vector_split(0x1004, 2, 4);  // shorter than the way to the boundary: all head
  EXPECT_EQ(s.head, 2);
  EXPECT_EQ(s.body + s.tail, 0);
  s = layout::vector_split(0x1002, 100, 4);  // float32 off its own size: never aligned, all head
  EXPECT_EQ(s.head, 100);
  EXPECT_EQ(s.body + s.tail, 0);
  s = layout::vector_split(0x1000, 0, 4);
  EXPECT_EQ(s.head + s.body + s.tail, 0);
}

TEST(UnscaleLayout, EveryOffsetReachesTheVectorsAfterLessThanOneVector) {
  for (int eb : {2, 4}) {
    const int64_t per_vec = layout::kVectorBytes / eb;
    for (uint64_t off = 0; off < 64; off += eb) {
      const uint64_t addr = 0x7f0000001000ull + off;
      for (int64_t n = 0; n <= 3 * per_vec + 3; ++n) {
        const auto s = layout::vector_split(addr, n, eb);
        SCOPED_TRACE(::testing::Message() << eb << "-byte elements at byte offset " << off << ", n " << n);
        ASSERT_EQ(s.head + s.body + s.tail, n);
        ASSERT_GE(s.head, 0);
        ASSERT_LT(s.head, per_vec);
        ASSERT_EQ(s.body % per_vec, 0);
        ASSERT_LT(s.tail, per_vec);
        if (s.body > 0) {
          ASSERT_EQ((addr + s.head * eb) % layout::kVectorBytes, 0u);
        }
        // Whatever the start, every whole vector after the first boundary goes vectorised.
        if (n - s.head >= per_vec) {
          ASSERT_GT(s.body, 0);
        }
      }
    }
  }
}

TEST(UnscaleLayout, ChunksCoverATensorOnceAndKeepItsAlignment) {
  for (int eb : {2, 4}) {
    const int64_t c = layout::chunk_elems(eb);
    EXPECT_EQ(c * eb, layout::kChunkBytes);
    EXPECT_EQ((c * eb) % layout::kVectorBytes, 0);
    for (int64_t n : {int64_t{0}, int64_t{1}, c - 1, c, c + 1, 3 * c + 7}) {
      const int64_t chunks = layout::chunk_count(n, eb);
      int64_t next = 0;
      for (int64_t k = 0; k < chunks; ++k) {
        const auto ch = layout::chunk_of(k, n, eb);
        ASSERT_EQ(ch.start, next) << n;
        ASSERT_GT(ch.len, 0) << n;
        ASSERT_LE(ch.len, c) << n;
        next += ch.len;
      }
      EXPECT_EQ(next, n) << "chunks of " << n << " " << eb << "-byte elements";
    }
  }
}

// The kernel's walk over a group, on the host: the same chunks and head/body/tail splits (through
// unscale_layout.h), each element unscaled by the reference on its own, the body in 16-byte pieces
// whose alignment is checked. Returns how often each element was visited, per tensor.
std::vector<std::vector<int>> walk_like_the_kernel(xk::DType dtype, const std::vector<xk::TensorSpan>& spans,
                                                   float inv_scale, float* found) {
  const int eb = dtype == xk::DType::Float32 ? 4 : 2;
  std::vector<std::vector<int>> visits;
  for (const auto& t : spans) {
    visits.emplace_back(static_cast<size_t>(t.numel), 0);
    auto& seen = visits.back();
    char* base = static_cast<char*>(t.data);
    const auto one = [&](int64_t i) {
      ++seen[static_cast<size_t>(i)];
      xk::TensorSpan e{base + i * eb, 1};
      xk::unscale_and_check_cpu(dtype, &e, 1, inv_scale, found);
    };
    for (int64_t k = 0; k < layout::chunk_count(t.numel, eb); ++k) {
      const auto ch = layout::chunk_of(k, t.numel, eb);
      const auto s = layout::vector_split(reinterpret_cast<uint64_t>(base + ch.start * eb), ch.len, eb);
      for (int64_t i = 0; i < s.head; ++i) one(ch.start + i);
      for (int64_t v = 0; v < s.body; v += layout::kVectorBytes / eb) {
        char* at = base + (ch.start + s.head + v) * eb;
        EXPECT_EQ(reinterpret_cast<uintptr_t>(at) % layout::kVectorBytes, 0u) << "a body vector off its boundary";
        for (int64_t i = 0; i < layout::kVectorBytes / eb; ++i) one(ch.start + s.head + v + i);
      }
      for (int64_t i = s.head + s.body; i < ch.len; ++i) one(ch.start + i);
    }
  }
  return visits;
}

// Views into one flat 16-byte aligned buffer at element offsets 1, 2, 3, ... past a boundary, with
// odd sizes (one spans several chunks): a bucket packed without padding looks like this.
TensorGroup odd_views(int eb) {
  const int64_t c = layout::chunk_elems(eb);
  const std::vector<int64_t> sizes = {1, 2, 3, 5, 7, 9, 13, 17, 31, 33, c + 3, 2 * c + 5, 100, 8};
  TensorGroup g;
  int64_t at = 0;
  for (size_t t = 0; t < sizes.size(); ++t) {
    const int64_t per_vec = layout::kVectorBytes / eb;
    at = (at + per_vec - 1) / per_vec * per_vec + static_cast<int64_t>(t + 1) % per_vec;  // offset t+1
    g.offset.push_back(at);
    g.numel.push_back(sizes[t]);
    at += sizes[t];
  }
  g.total = at;
  return g;
}

template <typename Raw>
void walk_matches_reference(xk::DType dtype, Raw (*from)(float), uint32_t inf_bits, uint32_t nan_bits) {
  const int eb = sizeof(Raw);
  const TensorGroup g = odd_views(eb);
  // Bad values in heads (index 0 and 1 of tensors starting 1 and 2 elements past a boundary), in a
  // body, in a second chunk's head and tail, and in the last tensor's last element.
  const int64_t c = layout::chunk_elems(eb);
  const std::vector<std::vector<std::pair<int, int64_t>>> cases = {
      {}, {{0, 0}}, {{1, 1}}, {{9, 20}}, {{10, c}}, {{10, c + 2}}, {{11, 2 * c + 4}}, {{13, 7}}, {{4, 4}, {12, 99}}};
  for (const uint32_t bits : {inf_bits, nan_bits}) {
    for (const auto& bad : cases) {
      for (const float inv_scale : {0.125f, 1.0f}) {
        // The buffer as 16-byte words, so that offset 0 is on a boundary.
        std::vector<uint64_t> words((g.total * eb + 15) / 16 * 2 + 2);
        Raw* flat = reinterpret_cast<Raw*>(words.data());
        for (int64_t i = 0; i < g.total; ++i) flat[i] = from(value(1, i) * 8.0f);
        for (auto [t, i] : bad) flat[g.offset[t] + i] = static_cast<Raw>(bits);
        std::vector<uint64_t> ref_words = words;
        Raw* ref = reinterpret_cast<Raw*>(ref_words.data());
        std::vector<xk::TensorSpan> spans, ref_spans;
        for (size_t t = 0; t < g.numel.size(); ++t) {
          spans.push_back({flat + g.offset[t], g.numel[t]});
          ref_spans.push_back({ref + g.offset[t], g.numel[t]});
        }
        float found = 0.0f, ref_found = 0.0f;
        const auto visits = walk_like_the_kernel(dtype, spans, inv_scale, &found);
        xk::unscale_and_check_cpu(dtype, ref_spans.data(), ref_spans.size(), inv_scale, &ref_found);
        SCOPED_TRACE(::testing::Message() << xk::dtype_name(dtype) << " inv_scale " << inv_scale << ", "
                                          << bad.size() << " bad values, first at tensor "
                                          << (bad.empty() ? -1 : bad[0].first));
        ASSERT_EQ(found, bad.empty() ? 0.0f : 1.0f);
        ASSERT_EQ(found, ref_found);
        for (size_t t = 0; t < visits.size(); ++t)
          for (size_t i = 0; i < visits[t].size(); ++i) ASSERT_EQ(visits[t][i], 1) << "tensor " << t << " index " << i;
        ASSERT_EQ(std::memcmp(words.data(), ref_words.data(), words.size() * sizeof(uint64_t)), 0);
      }
    }
  }
}

TEST(UnscaleLayout, KernelWalkOverOddViewsMatchesTheReferenceFloat32) {
  walk_matches_reference<uint32_t>(xk::DType::Float32, xk::float_to_bits, 0xff800000u, 0x7fc00001u);
}

TEST(UnscaleLayout, KernelWalkOverOddViewsMatchesTheReferenceFloat16) {
  walk_matches_reference<uint16_t>(xk::DType::Float16, xk::float_to_half_bits, 0x7c00u, 0xfe01u);
}

TEST(UnscaleLayout, KernelWalkOverOddViewsMatchesTheReferenceBFloat16) {
  walk_matches_reference<uint16_t>(xk::DType::BFloat16, xk::float_to_bf16_bits, 0xff80u, 0x7fc1u);
}

}  // namespace
