// GLM's partial RoPE on one head (rotate-half pairs over the first rotary_dim
// dims): the forward (QkNorm, qk_norm_cpu.cc) and the backward, its
// transposed rotation (QkNormBackward, qk_norm_backward_cpu.cc). Compiled
// once per SIMD target, like convert-inl.h.

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

// The forward: for i < half = rotary_dim / 2, with a = in(i), b = in(i + half)
// (float32 vectors from in(i, n), which gives the n values from i; lanes >= n
// meaningless) and c = cos[i], s = sin[i]:
//   out[i] = a*c - b*s,  out[i + half] = b*c + a*s
// in float32, each product and sum rounded, then one rounding to O. Each
// pair is read before it is written, so out may be the input (in place).
// `native`: bf16 stores may use the native conversion (StoreF32AsWith).
template <class D, class In, typename O>
HWY_INLINE void RotateHead(D d, size_t rotary_dim, const In& in, const float* HWY_RESTRICT cos,
                           const float* HWY_RESTRICT sin, O* out, bool native) {
  constexpr size_t N = hn::MaxLanes(d);
  const size_t half = rotary_dim / 2;
  const auto rotate = [&](size_t i, size_t n) {
    const bool full = n == N;
    const auto a = in(i, n);
    const auto b = in(half + i, n);
    const auto c = full ? hn::LoadU(d, cos + i) : LoadF32Partial(d, cos + i, n);
    const auto s = full ? hn::LoadU(d, sin + i) : LoadF32Partial(d, sin + i, n);
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

// The backward: the transposed rotation (the gradient of the forward) of
// the rotated dims of one head of the incoming gradient g, with
// dlo = g[i], dhi = g[i + half]:
//   out[i] = dlo*c + dhi*s,  out[i + half] = dhi*c - dlo*s
// in float64 (a product of two floats is exact there; the sum is rounded
// once), then rounded to float32 and to T. Torch autograd through
// Transformers' apply_rotary_pos_emb rounds each product and sum in the
// dtype: where the two terms cancel, a float32 version of this loses up to
// ~50 float32 ulps of dx (measured: `glmnorm bench`'s max_ulp of
// qk_norm_rope_backward), this one none. Half vectors of float32 widened to
// full vectors of float64, on every target the same operations. in and out
// must not overlap.
template <class D, typename T>
HWY_INLINE void RotateHeadBackward(D /*d*/, size_t rotary_dim, const T* HWY_RESTRICT in,
                                   const float* HWY_RESTRICT cos,
                                   const float* HWY_RESTRICT sin, T* HWY_RESTRICT out) {
  const hn::Repartition<double, D> dd;
  const hn::Rebind<float, decltype(dd)> dh;  // as many floats as dd has doubles
  constexpr size_t M = hn::MaxLanes(dd);
  const size_t half = rotary_dim / 2;
  const auto load = [&](const auto* p, size_t n) {
    return hn::PromoteTo(dd, n == M ? LoadF32(dh, p) : LoadF32Partial(dh, p, n));
  };
  const auto store = [&](hn::Vec<decltype(dd)> v, T* p, size_t n) {
    const auto f = hn::DemoteTo(dh, v);
    if (n == M) {
      StoreF32As(dh, f, p);
    } else {
      StoreF32AsPartial(dh, f, p, n);
    }
  };
  const auto rotate = [&](size_t i, size_t n) {
    const auto dlo = load(in + i, n);
    const auto dhi = load(in + half + i, n);
    const auto c = load(cos + i, n);
    const auto s = load(sin + i, n);
    store(hn::Add(hn::Mul(dlo, c), hn::Mul(dhi, s)), out + i, n);
    store(hn::Sub(hn::Mul(dhi, c), hn::Mul(dlo, s)), out + half + i, n);
  };
  size_t i = 0;
  for (; i + M <= half; i += M) rotate(i, M);
  if (i < half) rotate(i, half - i);
}

}  // namespace HWY_NAMESPACE
}  // namespace glmnorm
HWY_AFTER_NAMESPACE();

#endif  // GLMNORM_SRC_SIMD_ROPE_INL_H_
