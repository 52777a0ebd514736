#include "reference/oracle.h"

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
  // Integer dtypes (i8, i64) have no ulps: equal or not.
  if (SizeOf(t) > 4 || t == DType::kI8) {
    return std::memcmp(a, b, SizeOf(t)) == 0 ? 0 : kNaNUlpDistance;
  }
  uint32_t ua = 0, ub = 0;
  const size_t n = std::min(SizeOf(t), sizeof ua);  // <= 4 here; min() tells GCC
  std::memcpy(&ua, a, n);
  std::memcpy(&ub, b, n);
  const bool na = IsNan(t, ua), nb = IsNan(t, ub);
  if (na || nb) return na && nb ? 0 : kNaNUlpDistance;
  const int bits = static_cast<int>(SizeOf(t)) * 8;
  const int64_t d = Ordered(ua, bits) - Ordered(ub, bits);
  return d < 0 ? -d : d;
}

}  // namespace glmnorm::reference
