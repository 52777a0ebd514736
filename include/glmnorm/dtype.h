// Element types and exact scalar conversions (round-to-nearest-even).
#ifndef GLMNORM_DTYPE_H_
#define GLMNORM_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace glmnorm {

// kI8 and kF8E4M3 (OCP e4m3fn) are output types of the quantising norms
// only; kI64 is the dtype of index arrays (RoPE positions).
enum class DType : uint8_t { kF32, kBF16, kF16, kI8, kF8E4M3, kI64 };

constexpr size_t SizeOf(DType t) {
  return t == DType::kI64 ? 8
         : t == DType::kF32 ? 4
         : (t == DType::kBF16 || t == DType::kF16) ? 2
                                                    : 1;
}
constexpr bool IsFloatActivation(DType t) {
  return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16;
}
std::string_view Name(DType t);  // "f32", "bf16", "f16", "i8", "f8e4m3", "i64"

// PyTorch's result dtype of (weight W) * (activation T): equal types stay,
// any mix promotes to f32 (bf16 x f16 -> f32 too).
constexpr DType Promote(DType w, DType t) { return w == t ? t : DType::kF32; }

inline uint32_t BitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float FloatOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// bf16 is stored as its raw 16 bits.
inline float F32FromBF16(uint16_t b) { return FloatOf(uint32_t{b} << 16); }

// Round to nearest, ties to even, like PyTorch's c10::BFloat16. NaN stays a
// (quiet) NaN with its sign; overflow goes to inf; subnormals are kept.
inline uint16_t BF16FromF32(float f) {
  uint32_t u = BitsOf(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// IEEE binary16, stored as raw bits.
float F32FromF16(uint16_t h);
uint16_t F16FromF32(float f);  // round to nearest even, overflow -> inf

}  // namespace glmnorm

#endif  // GLMNORM_DTYPE_H_
