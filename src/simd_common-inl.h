// SIMD building blocks shared by every norm kernel, compiled once per target
// (see kernels_*.cc): float32 loads/stores of every dtype with the library's own
// round-to-nearest-even (Highway 1.0.3's demotions truncate, and its f16
// emulation on SSE4/scalar is wrong), and the canonical sum of squares.

// Per-target include guard (Highway's pattern).
#if defined(GLMNORM_SRC_SIMD_COMMON_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef GLMNORM_SRC_SIMD_COMMON_INL_H_
#undef GLMNORM_SRC_SIMD_COMMON_INL_H_
#else
#define GLMNORM_SRC_SIMD_COMMON_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "glmnorm/dtype.h"
#include "hwy/cache_control.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace glmnorm {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using BF16 = hwy::bfloat16_t;
using F16 = hwy::float16_t;

// F16C (AVX2 and AVX-512 targets) converts f16 exactly; elsewhere we go
// through the scalar conversions of dtype.cc.
#if HWY_TARGET <= HWY_AVX2 && HWY_ARCH_X86
constexpr bool kNativeF16 = true;
#else
constexpr bool kNativeF16 = false;
#endif

// The canonical reduction order (docs/ACCURACY.md): element i of a row goes to
// virtual lane i % kVirtualLanes; each lane sums kBlockChunks chunks into a
// block sum, block sums are added to the lane total in sequence, and the
// 64 lane totals are added as a binary tree (lane l += lane l + s, s = 32..1).
// Every target computes exactly these float32 operations.
constexpr size_t kVirtualLanes = 64;
constexpr size_t kBlockChunks = 8;

// ---------------------------------------------------------------- scalars

inline float ToF32(float v) { return v; }
inline float ToF32(BF16 v) { return F32FromBF16(v.bits); }
inline float ToF32(F16 v) { return F32FromF16(v.bits); }

inline void FromF32(float v, float* out) { *out = v; }
inline void FromF32(float v, BF16* out) { out->bits = BF16FromF32(v); }
inline void FromF32(float v, F16* out) { out->bits = F16FromF32(v); }

// ---------------------------------------------------------------- loads

template <class D>
HWY_INLINE hn::Vec<D> LoadF32(D d, const float* p) {
  return hn::LoadU(d, p);
}
template <class D>
HWY_INLINE hn::Vec<D> LoadF32(D d, const BF16* p) {
  return hn::PromoteTo(d, hn::LoadU(hn::Rebind<BF16, D>(), p));
}
template <class D>
HWY_INLINE hn::Vec<D> LoadF32(D d, const F16* p) {
  if constexpr (kNativeF16) {
    return hn::PromoteTo(d, hn::LoadU(hn::Rebind<F16, D>(), p));
  } else {
    HWY_ALIGN float buf[hn::MaxLanes(d)];
    for (size_t i = 0; i < hn::MaxLanes(d); ++i) buf[i] = ToF32(p[i]);
    return hn::Load(d, buf);
  }
}

// Loads n < Lanes(d) elements; the other lanes are zero.
template <class D, typename T>
HWY_INLINE hn::Vec<D> LoadF32Partial(D d, const T* p, size_t n) {
  HWY_ALIGN float buf[hn::MaxLanes(d)] = {};
  for (size_t i = 0; i < n; ++i) buf[i] = ToF32(p[i]);
  return hn::Load(d, buf);
}

// ---------------------------------------------------------------- rounding

// bf16 round-to-nearest-even of each lane, as float32 bits in the upper half
// (lower 16 bits zero); NaN stays a quiet NaN of the same sign.
template <class D>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<D>> RoundedBF16Bits(D /*d*/, hn::Vec<D> v) {
  const hn::RebindToUnsigned<D> du;
  const hn::RebindToSigned<D> di;
  const auto u = hn::BitCast(du, v);
  const auto lsb = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u));
  const auto rounded = hn::Add(hn::Add(u, hn::Set(du, 0x7FFFu)), lsb);
  const auto quiet = hn::Or(u, hn::Set(du, 0x00400000u));
  const auto is_nan = hn::Gt(hn::BitCast(di, hn::And(u, hn::Set(du, 0x7FFFFFFFu))),
                             hn::Set(di, 0x7F800000));
  const auto bits = hn::IfThenElse(hn::RebindMask(du, is_nan), quiet, rounded);
  return hn::And(bits, hn::Set(du, 0xFFFF0000u));
}

// The same for lanes known not to be NaN (inf is fine): 4 integer ops.
template <class D>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<D>> RoundedBF16BitsNoNaN(D /*d*/, hn::Vec<D> v) {
  const hn::RebindToUnsigned<D> du;
  const auto u = hn::BitCast(du, v);
  const auto lsb = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u));
  return hn::Add(hn::Add(u, hn::Set(du, 0x7FFFu)), lsb);  // low 16 bits: garbage
}

// Rounds each lane to T and back (the reference's cast to the input dtype).
// kMayBeNaN false: the caller guarantees no lane is NaN (faster bf16 path).
template <typename T, bool kMayBeNaN = true, class D>
HWY_INLINE hn::Vec<D> RoundTo(D d, hn::Vec<D> v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else if constexpr (std::is_same_v<T, BF16>) {
    if constexpr (kMayBeNaN) return hn::BitCast(d, RoundedBF16Bits(d, v));
    const hn::RebindToUnsigned<D> du;
    return hn::BitCast(d, hn::And(RoundedBF16BitsNoNaN(d, v), hn::Set(du, 0xFFFF0000u)));
  } else if constexpr (kNativeF16) {
    return hn::PromoteTo(d, hn::DemoteTo(hn::Rebind<F16, D>(), v));
  } else {
    HWY_ALIGN float buf[hn::MaxLanes(d)];
    hn::Store(v, d, buf);
    for (size_t i = 0; i < hn::MaxLanes(d); ++i) buf[i] = F32FromF16(F16FromF32(buf[i]));
    return hn::Load(d, buf);
  }
}

// ---------------------------------------------------------------- stores

// StoreF32As(d, v, p): rounds v to the storage type of p and stores it.
// kMayBeNaN as in RoundTo. kStream: non-temporal store (p must be aligned to
// the stored vector's size); large outputs skip the cache-line reads that a
// normal store costs, like memcpy's rep movsb does.
template <bool kMayBeNaN = true, bool kStream = false, class D>
HWY_INLINE void StoreF32As(D d, hn::Vec<D> v, float* p) {
  if constexpr (kStream) {
    hn::Stream(v, d, p);
  } else {
    hn::StoreU(v, d, p);
  }
}
template <bool kMayBeNaN = true, bool kStream = false, class D>
HWY_INLINE void StoreF32As(D d, hn::Vec<D> v, BF16* p) {
  const hn::RebindToSigned<D> di;
  const hn::Rebind<uint16_t, D> du16;
  hn::Vec<hn::RebindToUnsigned<D>> high;
  if constexpr (kMayBeNaN) {
    high = hn::ShiftRight<16>(RoundedBF16Bits(d, v));
  } else {
    high = hn::ShiftRight<16>(RoundedBF16BitsNoNaN(d, v));
  }
  const auto packed = hn::DemoteTo(du16, hn::BitCast(di, high));
  auto* out = reinterpret_cast<uint16_t*>(p);
  if constexpr (kStream) {
    hn::Stream(packed, du16, out);
  } else {
    hn::StoreU(packed, du16, out);
  }
}
template <bool kMayBeNaN = true, bool kStream = false, class D>
HWY_INLINE void StoreF32As(D d, hn::Vec<D> v, F16* p) {
  if constexpr (kNativeF16) {
    const hn::Rebind<F16, D> df16;
    if constexpr (kStream) {
      hn::Stream(hn::DemoteTo(df16, v), df16, p);
    } else {
      hn::StoreU(hn::DemoteTo(df16, v), df16, p);
    }
  } else {
    HWY_ALIGN float buf[hn::MaxLanes(d)];
    hn::Store(v, d, buf);
    for (size_t i = 0; i < hn::MaxLanes(d); ++i) FromF32(buf[i], p + i);
  }
}

// Stores the first n < Lanes(d) lanes.
template <class D, typename T>
HWY_INLINE void StoreF32AsPartial(D d, hn::Vec<D> v, T* p, size_t n) {
  HWY_ALIGN float buf[hn::MaxLanes(d)];
  hn::Store(v, d, buf);
  for (size_t i = 0; i < n; ++i) FromF32(buf[i], p + i);
}

// True when no element of the n values at p is inf or NaN.
template <class D, typename T>
HWY_INLINE bool AllFinite(D d, const T* p, size_t n) {
  constexpr size_t N = hn::MaxLanes(d);
  const hn::RebindToUnsigned<D> du;
  auto bad = hn::Zero(du);
  size_t i = 0;
  // |v| > max or NaN: the exponent field is all ones.
  const auto exp_mask = hn::Set(du, 0x7F800000u);
  for (; i + N <= n; i += N) {
    const auto u = hn::BitCast(du, LoadF32(d, p + i));
    bad = hn::Or(bad, hn::VecFromMask(du, hn::Eq(hn::And(u, exp_mask), exp_mask)));
  }
  if (i < n) {
    const auto u = hn::BitCast(du, LoadF32Partial(d, p + i, n - i));
    bad = hn::Or(bad, hn::VecFromMask(du, hn::Eq(hn::And(u, exp_mask), exp_mask)));
  }
  return hn::AllTrue(du, hn::Eq(bad, hn::Zero(du)));
}

// ---------------------------------------------------------------- reduction

// Adds the lanes of v as a binary tree: lane l += lane l + Lanes/2, halving
// until one lane is left; the same pairing as the canonical 64-lane tree.
template <class D>
HWY_INLINE float TreeSumOfLanes(D d, hn::Vec<D> v) {
#if HWY_TARGET == HWY_SCALAR
  (void)d;
  return hn::GetLane(v);
#else
  if constexpr (hn::MaxLanes(d) == 1) {
    return hn::GetLane(v);
  } else {
    const hn::Half<D> dh;
    return TreeSumOfLanes(dh, hn::Add(hn::LowerHalf(dh, v), hn::UpperHalf(dh, v)));
  }
#endif
}

// Adds the squares of one 64-value chunk starting at `base` to acc. The
// K vectors of a chunk are independent chains, so the adds pipeline.
template <size_t K, class D, class V, class Load>
HWY_INLINE void AddChunkSquares(D d, size_t base, V* HWY_RESTRICT acc, const Load& load) {
  constexpr size_t N = hn::MaxLanes(d);
  for (size_t k = 0; k < K; ++k) {
    const V v = load(d, base + k * N);
    acc[k] = hn::Add(acc[k], hn::Mul(v, v));
  }
}

// Canonical sum of squares of a row of `width` values. `load(d, i)` returns
// the float32 values i .. i+Lanes-1 of the row; `load_partial(d, i, n)` the n
// values from i with zeros after them.
template <class D, class Load, class LoadPartial>
HWY_INLINE float CanonicalSumOfSquares(D d, size_t width, const Load& load,
                                       const LoadPartial& load_partial) {
  using V = hn::Vec<D>;
  constexpr size_t N = hn::MaxLanes(d);
  static_assert(kVirtualLanes % N == 0, "vector wider than the virtual lanes");
  constexpr size_t K = kVirtualLanes / N;
  constexpr size_t kBlock = kVirtualLanes * kBlockChunks;
  V total[K];
  V block[K];
  for (size_t k = 0; k < K; ++k) total[k] = hn::Zero(d);
  // Whole blocks of kBlockChunks full chunks: the hot loop.
  size_t base = 0;
  for (; base + kBlock <= width; base += kBlock) {
    for (size_t k = 0; k < K; ++k) block[k] = hn::Zero(d);
    for (size_t c = 0; c < kBlockChunks; ++c) {
      AddChunkSquares<K>(d, base + c * kVirtualLanes, block, load);
    }
    for (size_t k = 0; k < K; ++k) total[k] = hn::Add(total[k], block[k]);
  }
  // The last, partial block: its full chunks, then the zero-padded chunk.
  if (base < width) {
    for (size_t k = 0; k < K; ++k) block[k] = hn::Zero(d);
    for (; base + kVirtualLanes <= width; base += kVirtualLanes) {
      AddChunkSquares<K>(d, base, block, load);
    }
    for (size_t k = 0; k < K && base + k * N < width; ++k) {
      const size_t i = base + k * N;
      const V v = i + N <= width ? load(d, i) : load_partial(d, i, width - i);
      block[k] = hn::Add(block[k], hn::Mul(v, v));
    }
    for (size_t k = 0; k < K; ++k) total[k] = hn::Add(total[k], block[k]);
  }
  // Tree over whole vectors (lane distance >= N), then inside one vector.
  for (size_t half = K / 2; half >= 1; half /= 2) {
    for (size_t k = 0; k < half; ++k) total[k] = hn::Add(total[k], total[k + half]);
  }
  return TreeSumOfLanes(d, total[0]);
}

// r = 1 / sqrt(sum / width + eps), float32 like the reference.
HWY_INLINE float InverseRms(float sum_sq, size_t width, float eps) {
  const float mean = sum_sq / static_cast<float>(width);
  return 1.0f / std::sqrt(mean + eps);
}

// True when float32 squares overflowed (a finite row near float max gives an
// infinite sum, and the reference's r = 0 zeroes the row) or underflowed in a
// way eps does not hide (tiny rows with eps ~ 0). NaN and inf inputs give a
// NaN or inf sum too; RescaledInverseRms tells them apart.
HWY_INLINE bool NeedsRescale(float sum_sq, size_t width, float eps) {
  return std::isinf(sum_sq) ||
         (sum_sq < 0x1p-96f && sum_sq / static_cast<float>(width) >= eps * 0x1p-25f);
}

// 1/rms of a row as a float32 multiplier r, applied as h = (x * prescale) * r.
// prescale is 1 except on the rescaling path below.
struct InvRms {
  float r;
  float prescale;
  bool finite_row;  // no inf or NaN in the row (so x * r has no NaN)
};

// The slow path for NeedsRescale rows: the canonical sum of squares of the
// row scaled by a power of two (exact) so that max|x| is near 1, and r for
// the scaled row in float64 (so r stays a normal float32 even for rows near
// float max). Rows holding inf or NaN, or all zeros, keep the plain formula.
template <class D, class Load, class LoadPartial>
HWY_NOINLINE InvRms RescaledInverseRms(D d, size_t width, float sum_sq, float eps,
                                       const Load& load, const LoadPartial& load_partial) {
  constexpr size_t N = hn::MaxLanes(d);
  auto vmax = hn::Zero(d);
  size_t i = 0;
  for (; i + N <= width; i += N) vmax = hn::Max(vmax, hn::Abs(load(d, i)));
  if (i < width) vmax = hn::Max(vmax, hn::Abs(load_partial(d, i, width - i)));
  HWY_ALIGN float lanes[N];
  hn::Store(vmax, d, lanes);
  float max_abs = 0.0f;
  for (size_t k = 0; k < N; ++k) max_abs = std::max(max_abs, lanes[k]);
  if (!(max_abs > 0.0f) || !std::isfinite(max_abs)) {
    return {InverseRms(sum_sq, width, eps), 1.0f, std::isfinite(max_abs)};
  }
  const int exponent = std::clamp(-std::ilogb(max_abs), -126, 126);
  const float scale = std::ldexp(1.0f, exponent);
  const auto vscale = hn::Set(d, scale);
  const float scaled_sum = CanonicalSumOfSquares(
      d, width, [&](auto dd, size_t j) { return hn::Mul(load(dd, j), vscale); },
      [&](auto dd, size_t j, size_t n) { return hn::Mul(load_partial(dd, j, n), vscale); });
  const double s = scale;
  const double mean = static_cast<double>(scaled_sum) / static_cast<double>(width);
  return {static_cast<float>(1.0 / std::sqrt(mean + static_cast<double>(eps) * s * s)), scale,
          true};
}

// InverseRms of a row, with the rescaling fallback.
template <class D, class Load, class LoadPartial>
HWY_INLINE InvRms RowInverseRms(D d, size_t width, float eps, const Load& load,
                                const LoadPartial& load_partial) {
  const float sum_sq = CanonicalSumOfSquares(d, width, load, load_partial);
  if (HWY_UNLIKELY(NeedsRescale(sum_sq, width, eps))) {
    return RescaledInverseRms(d, width, sum_sq, eps, load, load_partial);
  }
  return {InverseRms(sum_sq, width, eps), 1.0f, std::isfinite(sum_sq)};
}

}  // namespace HWY_NAMESPACE
}  // namespace glmnorm
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
