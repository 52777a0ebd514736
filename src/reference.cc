#include "reference.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

namespace glmnorm::reference {

namespace {

// float64 -> float32 with a single round-to-nearest-even: the C++ cast.
float F32FromF64(double v) { return static_cast<float>(v); }

// v rounded to float32 with round-to-odd: exact values stay, others get
// the float32 toward zero with its lowest bit set. Rounding that to bf16 or
// f16 (far fewer bits) gives the same result as rounding v once.
float F32RoundToOdd(double v) {
  const float f = static_cast<float>(v);
  if (std::isnan(v) || static_cast<double>(f) == v) return f;
  const float toward_zero =
      std::fabs(static_cast<double>(f)) > std::fabs(v) ? std::nextafter(f, 0.0f) : f;
  return FloatOf(BitsOf(toward_zero) | 1u);
}

uint16_t BF16FromF64(double v) { return BF16FromF32(F32RoundToOdd(v)); }
uint16_t F16FromF64(double v) { return F16FromF32(F32RoundToOdd(v)); }

}  // namespace

double Load(const void* base, DType t, int64_t index) {
  switch (t) {
    case DType::kF32: return static_cast<const float*>(base)[index];
    case DType::kBF16: return F32FromBF16(static_cast<const uint16_t*>(base)[index]);
    case DType::kF16: return F32FromF16(static_cast<const uint16_t*>(base)[index]);
    default: return std::numeric_limits<double>::quiet_NaN();
  }
}

void Store(void* base, DType t, int64_t index, double v) {
  switch (t) {
    case DType::kF32: static_cast<float*>(base)[index] = F32FromF64(v); break;
    case DType::kBF16: static_cast<uint16_t*>(base)[index] = BF16FromF64(v); break;
    case DType::kF16: static_cast<uint16_t*>(base)[index] = F16FromF64(v); break;
    default: break;
  }
}

double RoundTo(DType t, double v) {
  switch (t) {
    case DType::kF32: return F32FromF64(v);
    case DType::kBF16: return F32FromBF16(BF16FromF64(v));
    case DType::kF16: return F32FromF16(F16FromF64(v));
    default: return v;
  }
}

namespace {
template <typename Ptr>
int64_t RowOffset(const BasicTensorView<Ptr>& v, int64_t row) {
  int64_t off = 0;
  for (int i = v.rank - 2; i >= 0; --i) {
    off += (row % v.shape[i]) * v.stride[i];
    row /= v.shape[i];
  }
  return off;
}
}  // namespace

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
      if (options.weight_offset != 0.0f) g += options.weight_offset;
      double h = Load(xr, x.dtype, i) * r;
      if (options.rounding == Rounding::kCastThenScale && x.dtype != DType::kF32) {
        h = RoundTo(x.dtype, h);
      }
      Store(yr, y.dtype, i, g * h);
    }
  }
}

namespace {
// Maps the bits of a float of `bits` width to a line where adjacent floats
// are adjacent integers (negative values mirrored below zero).
int64_t Ordered(uint32_t u, int bits) {
  const uint32_t sign = 1u << (bits - 1);
  const int64_t mag = u & (sign - 1);
  return (u & sign) ? -mag : mag;
}
bool IsNan(DType t, uint32_t u) {
  switch (t) {
    case DType::kF32: return (u & 0x7FFFFFFFu) > 0x7F800000u;
    case DType::kBF16: return (u & 0x7FFFu) > 0x7F80u;
    case DType::kF16: return (u & 0x7FFFu) > 0x7C00u;
    default: return false;
  }
}
}  // namespace

int64_t UlpDistance(DType t, const void* a, const void* b) {
  uint32_t ua = 0, ub = 0;
  std::memcpy(&ua, a, SizeOf(t));
  std::memcpy(&ub, b, SizeOf(t));
  const bool na = IsNan(t, ua), nb = IsNan(t, ub);
  if (na || nb) return na && nb ? 0 : std::numeric_limits<int32_t>::max();
  const int bits = static_cast<int>(SizeOf(t)) * 8;
  const int64_t d = Ordered(ua, bits) - Ordered(ub, bits);
  return d < 0 ? -d : d;
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
      if (options.weight_offset != 0.0f) g += options.weight_offset;
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
