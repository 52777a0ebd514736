// The scalar conversions against independent definitions, exhaustively
// where the domain is small.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "glmnorm/dtype.h"
#include "reference/reference.h"
#include "support/test_support.h"

namespace glmnorm {
namespace {

// Nearest representable value by search over a sorted table, ties to the
// value with an even last bit: an independent definition of RNE.
uint16_t NearestByTable(const std::vector<std::pair<double, uint16_t>>& table, double v,
                        double overflow_threshold, uint16_t inf_bits) {
  const double a = std::fabs(v);
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  if (a >= overflow_threshold) return sign | inf_bits;
  auto it = std::lower_bound(table.begin(), table.end(), std::make_pair(a, uint16_t{0}));
  if (it == table.end()) return sign | table.back().second;  // below the overflow threshold
  if (it->first == a || it == table.begin()) return sign | it->second;
  const auto lo = *(it - 1), hi = *it;
  if (a - lo.first < hi.first - a) return sign | lo.second;
  if (a - lo.first > hi.first - a) return sign | hi.second;
  return sign | ((lo.second & 1) ? hi.second : lo.second);
}

std::vector<std::pair<double, uint16_t>> PositiveFiniteTable(bool bf16) {
  std::vector<std::pair<double, uint16_t>> t;
  for (uint32_t b = 0; b < 0x7C00u + (bf16 ? 0x0380u : 0); ++b) {
    const double v = bf16 ? F32FromBF16(uint16_t(b)) : F32FromF16(uint16_t(b));
    if (std::isfinite(v)) t.emplace_back(v, uint16_t(b));
  }
  return t;
}

TEST(DType, F16ToF32ExhaustiveRoundTrip) {
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const float f = F32FromF16(uint16_t(b));
    const bool nan = (b & 0x7FFF) > 0x7C00;
    if (nan) {
      EXPECT_TRUE(std::isnan(f)) << b;
      EXPECT_TRUE((F16FromF32(f) & 0x7FFF) > 0x7C00) << "NaN must stay NaN: " << b;
    } else {
      EXPECT_EQ(F16FromF32(f), b) << "bits " << b;
    }
  }
  EXPECT_EQ(F32FromF16(0x3C00), 1.0f);
  EXPECT_EQ(F32FromF16(0x0001), 5.9604644775390625e-8f);  // smallest subnormal
  EXPECT_EQ(F32FromF16(0x7BFF), 65504.0f);
}

TEST(DType, F16FromF32MatchesNearestByTable) {
  const auto table = PositiveFiniteTable(false);
  std::uniform_int_distribution<uint32_t> bits;
  auto check = [&](float f) {
    if (std::isnan(f)) return;
    const uint16_t want = NearestByTable(table, f, 65520.0, 0x7C00);
    ASSERT_EQ(F16FromF32(f), want) << "f=" << f;
  };
  for (int i = 0; i < (1 << 20); ++i) check(FloatOf(bits(test::Rng())));
  for (int i = 0; i < (1 << 20); ++i) {  // the f16 range, densely
    check(std::ldexp(std::uniform_real_distribution<float>(-1, 1)(test::Rng()),
                     std::uniform_int_distribution<int>(-26, 17)(test::Rng())));
  }
  // Midpoints and edges.
  for (float f : {65504.0f, 65519.0f, 65520.0f, 65536.0f, 2.98023223876953125e-8f,
                  8.940696716308594e-08f, 6.097555160522461e-05f, 0.0f, -0.0f}) {
    check(f);
  }
  EXPECT_EQ(F16FromF32(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(F16FromF32(-std::numeric_limits<float>::infinity()), 0xFC00);
  EXPECT_EQ(F16FromF32(70000.0f), 0x7C00);
}

TEST(DType, BF16FromF32MatchesNearestByTable) {
  const auto table = PositiveFiniteTable(true);
  std::uniform_int_distribution<uint32_t> bits;
  // bf16 overflow: values >= max + half an ulp round to inf.
  const double threshold = double(F32FromBF16(0x7F7F)) + std::ldexp(1.0, 127 - 8);
  for (int i = 0; i < (1 << 20); ++i) {
    const float f = FloatOf(bits(test::Rng()));
    if (std::isnan(f)) {
      const uint16_t b = BF16FromF32(f);
      ASSERT_TRUE((b & 0x7FFF) > 0x7F80) << "NaN must stay NaN";
      ASSERT_EQ(b & 0x8000, (BitsOf(f) >> 16) & 0x8000) << "NaN keeps its sign";
      continue;
    }
    ASSERT_EQ(BF16FromF32(f), NearestByTable(table, f, threshold, 0x7F80)) << "f=" << f;
  }
  EXPECT_EQ(BF16FromF32(1.0f + 0x1p-8f), 0x3F80);          // tie -> even (down)
  EXPECT_EQ(BF16FromF32(1.0f + 3 * 0x1p-8f), 0x3F82);      // tie -> even (up)
  EXPECT_EQ(BF16FromF32(FloatOf(0x7FFFFFFFu)) & 0x7FC0, 0x7FC0);  // NaN, not inf
}

TEST(DType, ReferenceRoundsOnceFromDouble) {
  // 1 + 2^-8 + 2^-30 is just above a bf16 tie: a single rounding goes up,
  // rounding via float32 first would make it a tie and go down (to even).
  const double v = 1.0 + 0x1p-8 + 0x1p-30;
  EXPECT_EQ(reference::RoundTo(DType::kBF16, v), 1.0 + 0x1p-7);
  const double w = 1.0 + 0x1p-11 + 0x1p-40;  // same for f16
  EXPECT_EQ(reference::RoundTo(DType::kF16, w), 1.0 + 0x1p-10);
}

}  // namespace
}  // namespace glmnorm
