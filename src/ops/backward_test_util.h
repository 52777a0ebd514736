// The accuracy checks the backward tests share (rms_norm_backward_test.cc,
// add_rms_norm_backward_test.cc, qk_norm_backward_test.cc): a computed dx and
// dgamma against the float64 oracle (rms_norm_backward_reference.h), with the
// bars of docs/BACKWARD.md.
#ifndef GLMNORM_SRC_OPS_BACKWARD_TEST_UTIL_H_
#define GLMNORM_SRC_OPS_BACKWARD_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "glmnorm/glmnorm.h"
#include "reference/reference.h"
#include "support/test_support.h"

namespace glmnorm::bwdtest {

// Each row (of `rows` rows of `width`) random with its own scale.
inline void FillRows(test::Buffer& b, int64_t rows, int64_t width) {
  for (int64_t r = 0; r < rows; ++r) {
    test::Buffer row(b.dtype, width);
    test::FillRandom(row);
    std::memcpy(static_cast<char*>(b.data()) + r * width * SizeOf(b.dtype), row.data(),
                width * SizeOf(b.dtype));
  }
}

// The spacing of a dtype's values at v (0 for 0 and non-finite v).
inline double Ulp(DType t, double v) {
  const int mantissa = t == DType::kBF16 ? 8 : t == DType::kF16 ? 11 : 24;
  v = std::fabs(v);
  if (v == 0.0 || !std::isfinite(v)) return 0.0;
  int e = std::ilogb(v);
  const int min_e = t == DType::kF16 ? -14 : -126;
  if (e < min_e) e = min_e;
  return std::ldexp(1.0, e - (mantissa - 1));
}

// Running figures over a test, and its bars:
//   f32 dx: |dx - ref| <= kF32DxUlps ulp_f32(scale) for every element (scale:
//           the oracle's dx_scale, so cancellation does not inflate the
//           bound); also counted and printed: elements within 2 plain ulps of
//           ref (the target, not met by every element: see
//           docs/BACKWARD.md).
//   16-bit dx: within 1 ulp of the oracle rounded to the dtype in >= 99.9%
//           of the elements; every element within ulp(ref) + 2 ulp_f32(scale)
//           + the oracle's dx_slack (a 16-bit dh rounded at a midpoint).
//   dgamma (f32): |dg - ref| <= 1e-5 * sum|terms| + the rounding-midpoint slack.
//   dgamma (16-bit): within 1 ulp of the oracle rounded to the dtype.
// The float32 r (1/rms, computed like the forward: a float32 sum, mean, +eps,
// sqrt and division, each rounded: up to ~2.5 ulp) enters the second term of
// dx cubed (rr * (x * r) * c, c holding x * r again), plus ~2 ulp of the
// other roundings: a worst case near 10 ulp of the scale.
constexpr double kF32DxUlps = 10.0;

struct Totals {
  int64_t dx32 = 0, dx32_plain2 = 0, dx16 = 0, dx16_within1 = 0, bad = 0;
  double dx32_max_scaled_ulp = 0, dx32_max_plain_ulp = 0, dg_max_rel = 0;
  std::string first_bad;
  void Bad(const std::string& msg) {
    if (bad++ == 0) first_bad = msg;
  }
  void ExpectBars(const char* name) const {
    std::printf("[backward] %s: f32 dx %lld elements, max %.2f ulp of the scale, max %.2f plain "
                "ulp, %.5f%% within 2 plain ulp; 16-bit dx %lld elements, %.5f%% within 1 ulp; "
                "f32 dgamma max error %.2e of sum|terms|\n",
                name, (long long)dx32, dx32_max_scaled_ulp, dx32_max_plain_ulp,
                dx32 ? 100.0 * double(dx32_plain2) / double(dx32) : 100.0, (long long)dx16,
                dx16 ? 100.0 * double(dx16_within1) / double(dx16) : 100.0, dg_max_rel);
    EXPECT_EQ(bad, 0) << name << ": " << first_bad;
    if (dx16 > 0) {
      EXPECT_GE(double(dx16_within1), 0.999 * double(dx16)) << name;
    }
  }
};

// Compares computed dx (the views' row order) and dgamma with the oracle.
inline void CheckAgainstOracle(const reference::NormBackwardResult& ref,
                               const ConstTensorView& dx, const ConstTensorView& dgamma,
                               const std::string& what, Totals& t) {
  const int64_t width = ref.width;
  const size_t es = SizeOf(dx.dtype);
  for (int64_t row = 0; row < ref.rows; ++row) {
    const char* base = static_cast<const char*>(dx.data) + reference::RowOffset(dx, row) * es;
    for (int64_t i = 0; i < width; ++i) {
      const double want = ref.dx[row * width + i];
      const double scale = ref.dx_scale[row * width + i];
      const double got = reference::Load(base, dx.dtype, i);
      const double err = std::fabs(got - want);
      if (std::isnan(want) != std::isnan(got)) {
        t.Bad(what + ": dx NaN mismatch at row " + std::to_string(row) + " col " +
              std::to_string(i));
        continue;
      }
      if (std::isnan(want)) continue;
      if (dx.dtype == DType::kF32) {
        ++t.dx32;
        const double su = err / std::max(Ulp(DType::kF32, scale), 0x1p-149);
        const double pu = err / std::max(Ulp(DType::kF32, want), 0x1p-149);
        t.dx32_max_scaled_ulp = std::max(t.dx32_max_scaled_ulp, su);
        t.dx32_max_plain_ulp = std::max(t.dx32_max_plain_ulp, pu);
        if (pu <= 2.0) ++t.dx32_plain2;
        if (su > kF32DxUlps) {
          char msg[256];
          std::snprintf(msg, sizeof msg, ": dx row %lld col %lld got %.9g want %.9g (%.2f ulp of "
                        "scale %.3g)", (long long)row, (long long)i, got, want, su, scale);
          t.Bad(what + msg);
        }
      } else {
        ++t.dx16;
        uint32_t want_bits = 0;
        reference::Store(&want_bits, dx.dtype, 0, want);
        const int64_t ulps = reference::UlpDistance(dx.dtype, &want_bits, base + i * es);
        if (ulps <= 1) ++t.dx16_within1;
        const double bound = std::max(Ulp(dx.dtype, want), Ulp(dx.dtype, got)) +
                             2.0 * Ulp(DType::kF32, scale) + ref.dx_slack[row * width + i];
        if (ulps > 1 && err > bound) {
          char msg[256];
          std::snprintf(msg, sizeof msg,
                        ": dx row %lld col %lld got %.9g want %.9g (%lld ulp; scale %.3g, slack "
                        "%.3g)",
                        (long long)row, (long long)i, got, want, (long long)ulps, scale,
                        ref.dx_slack[row * width + i]);
          t.Bad(what + msg);
        }
      }
    }
  }
  for (int64_t i = 0; i < width; ++i) {
    const double want = ref.dgamma[i];
    const double got = reference::Load(dgamma.data, dgamma.dtype, i);
    if (std::isnan(want) || std::isnan(got)) {
      if (std::isnan(want) != std::isnan(got)) t.Bad(what + ": dgamma NaN mismatch");
      continue;
    }
    const double err = std::fabs(got - want);
    const double scale = ref.dgamma_scale[i];
    if (scale > 0 && dgamma.dtype == DType::kF32) t.dg_max_rel = std::max(t.dg_max_rel, std::max(0.0, err - ref.dgamma_slack[i]) / scale);
    bool ok;
    if (dgamma.dtype == DType::kF32) {
      ok = err <= 1e-5 * scale + ref.dgamma_slack[i] + 0x1p-140;
    } else {
      uint32_t want_bits = 0;
      reference::Store(&want_bits, dgamma.dtype, 0, want);
      const char* p = static_cast<const char*>(dgamma.data) + i * SizeOf(dgamma.dtype);
      ok = reference::UlpDistance(dgamma.dtype, &want_bits, p) <= 1 ||
           err <= 1e-5 * scale + ref.dgamma_slack[i] + Ulp(dgamma.dtype, want);
    }
    if (!ok) {
      char msg[256];
      std::snprintf(msg, sizeof msg, ": dgamma col %lld got %.9g want %.9g (sum|terms| %.3g)",
                    (long long)i, got, want, scale);
      t.Bad(what + msg);
    }
  }
}

}  // namespace glmnorm::bwdtest

#endif  // GLMNORM_SRC_OPS_BACKWARD_TEST_UTIL_H_
