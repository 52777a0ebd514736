// GLM's partial RoPE on one head (rotate-half pairs over the first rotary_dim
// dims), forward and transposed, shared by QkNorm's forward (qk_norm_cpu.cc)
// and its backward (qk_norm_backward_cpu.cc). Compiled once per SIMD target,
// like convert-inl.h.

// Per-target include guard (Highway's pattern).
#if defined(GLMNORM_SRC_SIMD_ROPE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef GLMNORM_SRC_SIMD_ROPE_INL_H_
#undef GLMNORM_SRC_SIMD_ROPE_INL_H_
#else
#define GLMNORM_SRC_SIMD_ROPE_INL_H_
#endif

#include <cstddef>

#include "hwy/highway.h"
#include "simd/convert-inl.h"

HWY_BEFORE_NAMESPACE();
namespace glmnorm {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// For i < half = rotary_dim / 2, with a = in(i), b = in(i + half) (float32,
// from in(i, n), which gives the n values from i; lanes >= n meaningless) and
// c = cos[i], s = sin[i]:
//   forward  (kTransposed false): out[i] = a*c - b*s, out[i + half] = b*c + a*s
//   backward (kTransposed true):  out[i] = a*c + b*s, out[i + half] = b*c - a*s
// The backward is the transposed rotation (the gradient of the forward), the
// same operations with s negated: each product and sum rounded to float32 as
// torch's autograd of Transformers' apply_rotary_pos_emb does them, then one
// rounding to O. Each pair is read before it is written, so out may be the
// input (in place). `native`: bf16 stores may use the native conversion
// (StoreF32AsWith).
template <bool kTransposed, class D, class In, typename O>
HWY_INLINE void RotateHead(D d, size_t rotary_dim, const In& in, const float* HWY_RESTRICT cos,
                           const float* HWY_RESTRICT sin, O* out, bool native) {
  constexpr size_t N = hn::MaxLanes(d);
  const size_t half = rotary_dim / 2;
  const auto rotate = [&](size_t i, size_t n) {
    const bool full = n == N;
    const auto a = in(i, n);
    const auto b = in(half + i, n);
    const auto c = full ? hn::LoadU(d, cos + i) : LoadF32Partial(d, cos + i, n);
    auto s = full ? hn::LoadU(d, sin + i) : LoadF32Partial(d, sin + i, n);
    if constexpr (kTransposed) s = hn::Neg(s);
    const auto lo = hn::Sub(hn::Mul(a, c), hn::Mul(b, s));
    const auto hi = hn::Add(hn::Mul(b, c), hn::Mul(a, s));
    if (full) {
      StoreF32AsWith(d, lo, out + i, native);
      StoreF32AsWith(d, hi, out + half + i, native);
    } else {
      StoreF32AsPartial(d, lo, out + i, n);
      StoreF32AsPartial(d, hi, out + half + i, n);
    }
  };
  size_t i = 0;
  for (; i + N <= half; i += N) rotate(i, N);
  if (i < half) rotate(i, half - i);
}

}  // namespace HWY_NAMESPACE
}  // namespace glmnorm
HWY_AFTER_NAMESPACE();

#endif  // GLMNORM_SRC_SIMD_ROPE_INL_H_
