#include "ops/rms_norm/rms_norm_reference.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "reference/oracle.h"

namespace glmnorm::reference {

void RmsNorm(const ConstTensorView& x, const ConstTensorView& gamma, const TensorView& y,
             const NormOptions& options) {
  const int64_t width = x.width();
  const int64_t rows = x.rows();
  const size_t xs = SizeOf(x.dtype), ys = SizeOf(y.dtype);
  for (int64_t row = 0; row < rows; ++row) {
    const auto* xr = static_cast<const char*>(x.data) + RowOffset(x, row) * xs;
    auto* yr = static_cast<char*>(y.data) + RowOffset(y, row) * ys;
    double sum = 0.0;
    for (int64_t i = 0; i < width; ++i) {
      const double v = Load(xr, x.dtype, i);
      sum += v * v;
    }
    const double r = 1.0 / std::sqrt(sum / static_cast<double>(width) +
                                     static_cast<double>(options.eps));
    for (int64_t i = 0; i < width; ++i) {
      double g = Load(gamma.data, gamma.dtype, i);
      // SPEC §1: g = gamma + weight_offset is a float32 (one rounding).
      if (options.weight_offset != 0.0f) g = RoundTo(DType::kF32, g + options.weight_offset);
      double h = Load(xr, x.dtype, i) * r;
      if (options.rounding == Rounding::kCastThenScale && x.dtype != DType::kF32) {
        h = RoundTo(x.dtype, h);
      }
      Store(yr, y.dtype, i, g * h);
    }
  }
}

Comparison CompareRmsNorm(const ConstTensorView& x, const ConstTensorView& gamma,
                          const ConstTensorView& y, const NormOptions& options,
                          int64_t ulp_limit, int64_t max_rows) {
  Comparison c;
  const int64_t width = x.width();
  const size_t xs = SizeOf(x.dtype), ys = SizeOf(y.dtype);
  const bool cast = options.rounding == Rounding::kCastThenScale && x.dtype != DType::kF32;
  const int64_t rows = std::min(max_rows, x.rows());
  for (int64_t row = 0; row < rows; ++row) {
    const auto* xr = static_cast<const char*>(x.data) + RowOffset(x, row) * xs;
    const auto* yr = static_cast<const char*>(y.data) + RowOffset(y, row) * ys;
    double sum = 0.0;
    for (int64_t i = 0; i < width; ++i) {
      const double v = Load(xr, x.dtype, i);
      sum += v * v;
    }
    const double r = 1.0 / std::sqrt(sum / double(width) + double(options.eps));
    for (int64_t i = 0; i < width; ++i) {
      double g = Load(gamma.data, gamma.dtype, i);
      // SPEC §1: g = gamma + weight_offset is a float32 (one rounding).
      if (options.weight_offset != 0.0f) g = RoundTo(DType::kF32, g + options.weight_offset);
      const double h = Load(xr, x.dtype, i) * r;
      double candidates[2] = {h, h};
      if (cast) {
        candidates[0] = RoundTo(x.dtype, h * (1.0 - 0x1p-20));
        candidates[1] = RoundTo(x.dtype, h * (1.0 + 0x1p-20));
      }
      int64_t best = INT64_MAX;
      for (double hc : candidates) {
        uint32_t want = 0;
        Store(&want, y.dtype, 0, g * hc);
        best = std::min(best, UlpDistance(y.dtype, &want, yr + i * ys));
      }
      ++c.elements;
      c.max_ulp = std::max(c.max_ulp, best);
      if (best > ulp_limit) {
        if (c.over_limit == 0) {
          char msg[256];
          std::snprintf(msg, sizeof(msg), "row %lld col %lld: x=%.9g gamma=%.9g y=%.9g ulp=%lld",
                        (long long)row, (long long)i, Load(xr, x.dtype, i), g,
                        Load(yr, y.dtype, i), (long long)best);
          c.first_failure = msg;
        }
        ++c.over_limit;
      }
    }
  }
  return c;
}

}  // namespace glmnorm::reference
