#include "ops/add_rms_norm/add_rms_norm_reference.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "reference/oracle.h"

namespace glmnorm::reference {

double AddedValue(const void* residual, DType r, const void* delta, DType d, int64_t index,
                  bool round) {
  const float s = static_cast<float>(Load(residual, r, index)) +
                  static_cast<float>(Load(delta, d, index));
  return round ? RoundTo(r, s) : static_cast<double>(s);
}

void AddRmsNorm(const TensorView& residual, const ConstTensorView& delta,
                const ConstTensorView& gamma, const TensorView& y,
                const AddNormOptions& options) {
  const int64_t width = residual.width();
  const size_t rs = SizeOf(residual.dtype), ds = SizeOf(delta.dtype), ys = SizeOf(y.dtype);
  std::vector<double> in(width);
  for (int64_t row = 0; row < residual.rows(); ++row) {
    auto* rr = static_cast<char*>(residual.data) + RowOffset(residual, row) * rs;
    const auto* dr = static_cast<const char*>(delta.data) + RowOffset(delta, row) * ds;
    auto* yr = static_cast<char*>(y.data) + RowOffset(y, row) * ys;
    double sum = 0.0;
    for (int64_t i = 0; i < width; ++i) {
      in[i] = AddedValue(rr, residual.dtype, dr, delta.dtype, i, options.normalize_rounded_sum);
      sum += in[i] * in[i];
    }
    const double r = 1.0 / std::sqrt(sum / double(width) + double(options.eps));
    for (int64_t i = 0; i < width; ++i) {
      // Read before residual is written: y may be delta.
      Store(rr, residual.dtype, i, AddedValue(rr, residual.dtype, dr, delta.dtype, i, false));
    }
    for (int64_t i = 0; i < width; ++i) {
      double g = Load(gamma.data, gamma.dtype, i);
      // SPEC §1: g = gamma + weight_offset is a float32 (one rounding).
      if (options.weight_offset != 0.0f) g = RoundTo(DType::kF32, g + options.weight_offset);
      double h = in[i] * r;
      if (options.rounding == Rounding::kCastThenScale && residual.dtype != DType::kF32) {
        h = RoundTo(residual.dtype, h);
      }
      Store(yr, y.dtype, i, g * h);
    }
  }
}

}  // namespace glmnorm::reference
