// Scalar dtype conversions: the exact, portable definitions that the SIMD
// kernels must match bit for bit.
#include "glmnorm/dtype.h"

namespace glmnorm {

std::string_view Name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kI8: return "i8";
    case DType::kF8E4M3: return "f8e4m3";
    case DType::kI64: return "i64";
  }
  return "unknown";
}

float F32FromF16(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  if (exp == 0x1F) return FloatOf(sign | 0x7F800000u | (mant << 13));  // inf / NaN
  if (exp != 0) return FloatOf(sign | ((exp + 112) << 23) | (mant << 13));
  // Zero or subnormal: mant * 2^-24, exact in float32.
  const float magnitude = static_cast<float>(mant) * 5.9604644775390625e-8f;
  return sign ? -magnitude : magnitude;
}

uint16_t F16FromF32(float f) {
  const uint32_t u = BitsOf(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return sign | 0x7E00u | static_cast<uint16_t>((abs >> 13) & 0x3FFu);
  if (abs >= 0x477FF000u) return sign | 0x7C00u;  // rounds to >= 65520: inf
  if (abs >= 0x38800000u) {                        // normal f16 (>= 2^-14)
    const uint32_t rounded = abs + 0xFFFu + ((abs >> 13) & 1u);
    return sign | static_cast<uint16_t>((rounded - 0x38000000u) >> 13);
  }
  // Subnormal f16 or zero: scale to units of 2^-24 and round to nearest even.
  // abs < 2^-14, so the float result below is exact up to the final rint.
  const float units = FloatOf(abs) * 16777216.0f;  // exact (power of two)
  uint32_t q = static_cast<uint32_t>(units);
  const float frac = units - static_cast<float>(q);
  if (frac > 0.5f || (frac == 0.5f && (q & 1u))) ++q;
  return sign | static_cast<uint16_t>(q);
}

}  // namespace glmnorm
