#include "reference.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

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


// ---------------------------------------------------------------- decoder ops

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
      if (options.weight_offset != 0.0f) g += options.weight_offset;
      double h = in[i] * r;
      if (options.rounding == Rounding::kCastThenScale && residual.dtype != DType::kF32) {
        h = RoundTo(residual.dtype, h);
      }
      Store(yr, y.dtype, i, g * h);
    }
  }
}

int8_t QuantizeI8(float value, float scale) {
  const float t = value / scale;
  if (std::isnan(t)) return 0;
  const float r = std::nearbyint(t);  // default rounding mode: ties to even
  return static_cast<int8_t>(std::clamp(r, -128.0f, 127.0f));
}

float F32FromE4M3(uint8_t bits) {
  const int e = (bits >> 3) & 0xF, m = bits & 7;
  float mag;
  if (e == 15 && m == 7) {
    mag = std::numeric_limits<float>::quiet_NaN();
  } else if (e == 0) {
    mag = std::ldexp(static_cast<float>(m), -9);
  } else {
    mag = std::ldexp(1.0f + static_cast<float>(m) / 8.0f, e - 7);
  }
  return (bits & 0x80) ? -mag : mag;
}

uint8_t QuantizeE4M3(float value, float scale) {
  const float t = value / scale;
  const uint8_t sign = std::signbit(t) ? 0x80 : 0x00;
  if (std::isnan(t)) return sign | 0x7F;
  const double a = std::fabs(static_cast<double>(t));
  uint8_t best = 0;
  double best_dist = std::numeric_limits<double>::infinity();
  for (int code = 0; code <= 0x7E; ++code) {  // 0x7E = 448, the largest finite
    const double dist = std::fabs(a - static_cast<double>(F32FromE4M3(static_cast<uint8_t>(code))));
    if (dist < best_dist || (dist == best_dist && (code & 1) == 0)) {
      best = static_cast<uint8_t>(code);
      best_dist = dist;
    }
  }
  return sign | best;  // beyond 448 the nearest is 448: saturation
}

float DynamicScale(const float* values, int64_t n, DType q_type) {
  double m = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isfinite(values[i])) m = std::max(m, std::fabs(double(values[i])));
  }
  if (m == 0.0) return 1.0f;
  const double qmax = q_type == DType::kF8E4M3 ? 448.0 : 127.0;
  // m / qmax rounded once to float32 (via float64: exact for a quotient of
  // floats), kept normal, then lowered until decoding qmax * scale is finite.
  const double exact = m / qmax;
  float scale = exact < 0x1p-126 ? 0x1p-126f : static_cast<float>(exact);
  while (std::isinf(static_cast<float>(double(scale) * qmax))) {
    scale = std::nextafter(scale, 0.0f);
  }
  return scale;
}

void QkNorm(const ConstTensorView& qkv_in, const TensorView& qkv_out, const QkHeads& heads,
            const ConstTensorView& q_gamma, const ConstTensorView& k_gamma,
            const NormOptions& options, const Rope& rope) {
  const int64_t hd = heads.head_dim;
  const size_t is = SizeOf(qkv_in.dtype), os = SizeOf(qkv_out.dtype);
  const DType o = qkv_out.dtype;
  std::vector<uint8_t> head(hd * os);
  const int64_t half = rope.rotary_dim / 2;
  for (int64_t t = 0; t < qkv_in.shape[0]; ++t) {
    for (int64_t h = 0; h < int64_t{heads.num_q_heads} + heads.num_k_heads; ++h) {
      const auto* x = static_cast<const char*>(qkv_in.data) + (t * qkv_in.stride[0] + h * hd) * is;
      auto* y = static_cast<char*>(qkv_out.data) + (t * qkv_out.stride[0] + h * hd) * os;
      reference::RmsNorm(Contiguous<const void*>(x, qkv_in.dtype, {1, hd}),
              h < heads.num_q_heads ? q_gamma : k_gamma,
              Contiguous<void*>(head.data(), o, {1, hd}), options);
      for (int64_t i = 0; i < hd; ++i) Store(y, o, i, Load(head.data(), o, i));
      if (half == 0) continue;
      const int64_t pos = rope.positions ? rope.positions[t] : t;
      const auto* c = static_cast<const float*>(rope.cos.data) + pos * rope.cos.stride[0];
      const auto* s = static_cast<const float*>(rope.sin.data) + pos * rope.sin.stride[0];
      for (int64_t i = 0; i < half; ++i) {
        const double a = Load(head.data(), o, i), b = Load(head.data(), o, i + half);
        Store(y, o, i, a * c[i] - b * s[i]);
        Store(y, o, i + half, b * c[i] + a * s[i]);
      }
    }
  }
}

}  // namespace glmnorm::reference
