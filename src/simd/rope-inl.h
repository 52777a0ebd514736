// GLM's partial RoPE on one head (rotate-half pairs over the first rotary_dim
// dims): the forward (QkNorm, qk_norm_cpu.cc) and the backward, its
// transposed rotation (QkNormBackward: in the norm backward's row loop,
// rms_norm_backward_cpu.cc, or for very wide heads its own pass,
// qk_norm_backward_cpu.cc). Compiled
// once per SIMD target, like convert-inl.h.

// Per-target include guard (Highway's pattern).
#if defined(GLMNORM_SRC_SIMD_ROPE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef GLMNORM_SRC_SIMD_ROPE_INL_H_
#undef GLMNORM_SRC_SIMD_ROPE_INL_H_
#else
#define GLMNORM_SRC_SIMD_ROPE_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>

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

#if GLMNORM_HAVE_BF16_PAIRS
// Whether RotateBf16HeadPairs takes a head: half = rotary_dim / 2 a multiple
// of 32 (GLM-4.5: rotary_dim 64).
HWY_INLINE bool RotatesInPairs(size_t rotary_dim) { return rotary_dim % 64 == 0; }

// cos or sin (half values, RotatesInPairs) in the lane order of LoadBf16Pairs:
// per 32 values, the 16 even-indexed ones, then the 16 odd ones. Once per
// token: every head of the token rotates by the same angles.
HWY_INLINE void SplitPairsOf(const float* HWY_RESTRICT v, size_t half,
                             float* HWY_RESTRICT out) {
  for (size_t i = 0; i < half; i += 32) {
    for (size_t m = 0; m < 16; ++m) {
      out[i + m] = v[i + 2 * m];
      out[i + 16 + m] = v[i + 2 * m + 1];
    }
  }
}

// RotateHead of a stored bf16 head in place, 32 pairs per step: one 64-byte
// load gives 32 values as even and odd lanes, one conversion stores 32
// (StoreBf16Pairs, with its guard for subnormal results), where RotateHead
// widens and narrows 16 at a time. The same operations per element (cos and
// sin split by SplitPairsOf), so the same bits. RotatesInPairs(rotary_dim).
HWY_INLINE void RotateBf16HeadPairs(size_t rotary_dim, BF16* y, const float* split_cos,
                                    const float* split_sin) {
  const size_t half = rotary_dim / 2;
  for (size_t i = 0; i < half; i += 32) {
    const Bf16Pairs a = LoadBf16Pairs(y + i);
    const Bf16Pairs b = LoadBf16Pairs(y + half + i);
    const __m512 c_even = _mm512_loadu_ps(split_cos + i);
    const __m512 c_odd = _mm512_loadu_ps(split_cos + i + 16);
    const __m512 s_even = _mm512_loadu_ps(split_sin + i);
    const __m512 s_odd = _mm512_loadu_ps(split_sin + i + 16);
    // lo = a*c - b*s, hi = b*c + a*s (no FMA: -ffp-contract=off).
    const Bf16Pairs lo{
        _mm512_sub_ps(_mm512_mul_ps(a.even, c_even), _mm512_mul_ps(b.even, s_even)),
        _mm512_sub_ps(_mm512_mul_ps(a.odd, c_odd), _mm512_mul_ps(b.odd, s_odd))};
    const Bf16Pairs hi{
        _mm512_add_ps(_mm512_mul_ps(b.even, c_even), _mm512_mul_ps(a.even, s_even)),
        _mm512_add_ps(_mm512_mul_ps(b.odd, c_odd), _mm512_mul_ps(a.odd, s_odd))};
    StoreBf16Pairs<false>(lo, y + i);
    StoreBf16Pairs<false>(hi, y + half + i);
  }
}
#endif  // GLMNORM_HAVE_BF16_PAIRS

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

// The gradient of one head of head_dim values before the forward's RoPE:
// RotateHeadBackward over the first rotary_dim dims, the others as they are
// (not rotated). in and out must not overlap.
template <class D, typename T>
HWY_INLINE void UnrotateHead(D d, size_t rotary_dim, size_t head_dim, const T* HWY_RESTRICT in,
                             const float* HWY_RESTRICT cos, const float* HWY_RESTRICT sin,
                             T* HWY_RESTRICT out) {
  RotateHeadBackward(d, rotary_dim, in, cos, sin, out);
  std::memcpy(out + rotary_dim, in + rotary_dim, (head_dim - rotary_dim) * sizeof(T));
}

}  // namespace HWY_NAMESPACE
}  // namespace glmnorm
HWY_AFTER_NAMESPACE();

#endif  // GLMNORM_SRC_SIMD_ROPE_INL_H_
